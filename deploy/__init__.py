"""Deployment: what a machine without the network needs to run the pipeline (`make bundle`, deploy/bundle.py).

Not part of a run: nothing in pipeline/ or below imports it; it reads the presets (pipeline/config.py) to know
which model files a node needs.
"""
