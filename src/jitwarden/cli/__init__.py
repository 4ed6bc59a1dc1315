"""The command line: argument parsing, one command per module, one renderer. The only layer that prints tables or imports rich.

See ARCHITECTURE.md for the layers and the rules between them.
"""
