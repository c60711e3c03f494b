"""Probes as scikit-learn estimators, splits and control tasks."""
