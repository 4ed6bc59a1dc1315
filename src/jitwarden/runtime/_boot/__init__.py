"""The directory ``jitwarden run`` puts first on ``PYTHONPATH``: its ``sitecustomize`` guards torch's loaders."""
