"""Framework integrations; each module imports its framework when imported."""
