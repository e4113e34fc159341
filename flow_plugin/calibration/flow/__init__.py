"""BERT-flow: a Glow-style normalizing flow, composed from nflows transforms and fitted by
maximum likelihood on unlabeled embeddings.

- :mod:`.glow`: the architecture (nflows transforms only);
- :mod:`.train`: the likelihood fit (AdamW, clipping, seeded shuffling);
- :mod:`._fast`: the optional fused trainer for the paper's flow;
- :mod:`.calibrator`: :class:`FlowCalibrator`, the scikit-learn estimator.
"""

from flow_plugin.calibration.flow.calibrator import FlowCalibrator

__all__ = ["FlowCalibrator"]
