"""The one custom sentence-transformers module of an export: a fitted flow, which no standard module can hold.

:class:`FlowCalibration` calls the fitted :class:`flow_plugin.calibration.FlowCalibrator`'s own ``transform``. Its
folder holds ``config.json`` and ``calibrator.npz`` (``Calibrator.save``; ``Calibrator.load`` checks method and
width). Loading needs flow-plugin installed and ``SentenceTransformer(folder, trust_remote_code=True)``: exported
folders name this module's path in their ``modules.json``, so it stays where it is.
"""

from __future__ import annotations

import os
from typing import Any

from sentence_transformers.sentence_transformer.modules import Module

from flow_plugin.calibration import Calibrator, FlowCalibrator
from flow_plugin.errors import CalibratorFileError

#: the calibrator file inside the module's folder
CALIBRATOR_FILE = "calibrator.npz"


class FlowCalibration(Module):
    """``sentence_embedding`` -> the fitted flow's latent (``FlowCalibrator.transform``). The flow runs where the
    calibrator was loaded (CUDA when available, else the CPU); the result keeps the input's dtype and device."""

    config_keys: list[str] = ["method", "n_features_in", "n_features_out"]

    def __init__(self, calibrator: Calibrator) -> None:
        super().__init__()
        if calibrator.method != "flow":
            raise CalibratorFileError(f"FlowCalibration holds a flow, not a {calibrator.method!r} calibrator")
        calibrator._check_is_fitted()
        self.calibrator, self.method = calibrator, calibrator.method
        self.n_features_in, self.n_features_out = int(calibrator.n_features_in_), int(calibrator.n_features_out_)

    def get_embedding_dimension(self) -> int:
        return self.n_features_out

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        embedding = features["sentence_embedding"]
        latent = self.calibrator.transform(embedding.detach().float().cpu().numpy())
        features["sentence_embedding"] = embedding.new_tensor(latent)
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.save_config(output_path)
        self.calibrator.save(os.path.join(output_path, CALIBRATOR_FILE))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs: Any) -> FlowCalibration:
        hub = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        config = cls.load_config(model_name_or_path, **hub)
        path = cls.load_file_path(model_name_or_path, filename=CALIBRATOR_FILE, **hub)
        if path is None:
            where = os.path.join(str(model_name_or_path), subfolder)
            raise CalibratorFileError(f"{where} has no {CALIBRATOR_FILE}: export the model again")
        return cls(FlowCalibrator.load(path, n_features=config.get("n_features_in")))
