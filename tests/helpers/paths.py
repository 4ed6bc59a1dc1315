"""Where the repository's parts lie, for tests and benchmarks."""

import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
SRC = os.path.join(REPO, "src")
DATA = os.path.join(TESTS, "data")
BENCHMARKS = os.path.join(REPO, "benchmarks")
DOCS = os.path.join(REPO, "docs")
