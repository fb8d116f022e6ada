"""gpulse: finds sync stalls and stragglers in multi-GPU training."""
__version__ = "0.1.0"
