"""The one custom sentence-transformers module of an export: a fitted flow.

A flow (and each of its variants) is not an affine map, so no standard module can hold it.
:class:`FlowCalibration` wraps the fitted :class:`flow_plugin.calibration.FlowCalibrator` and
calls its own ``transform``, so the folder computes exactly what flow-plugin computes. Its
folder holds ``config.json`` and the calibrator file ``calibrator.npz`` (written by
``Calibrator.save``, read by ``Calibrator.load`` with its method and dimension checks).

Loading it needs flow-plugin installed and ``SentenceTransformer(folder, trust_remote_code=True)``:
sentence-transformers (>= 6) imports a module class outside its own package only when told to.
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
    """``sentence_embedding`` -> the fitted flow's latent (``FlowCalibrator.transform``).

    The flow runs where the calibrator was loaded (CUDA when available, else the CPU); the
    embedding goes there and back, and the result keeps the input's dtype and device.
    """

    config_keys: list[str] = ["method", "n_features_in", "n_features_out"]

    def __init__(self, calibrator: Calibrator) -> None:
        super().__init__()
        if calibrator.method != "flow":
            raise CalibratorFileError(f"FlowCalibration holds a flow, not a {calibrator.method!r} calibrator")
        calibrator._check_is_fitted()
        self.calibrator = calibrator

    @property
    def method(self) -> str:
        return self.calibrator.method

    @property
    def n_features_in(self) -> int:
        return int(self.calibrator.n_features_in_)

    @property
    def n_features_out(self) -> int:
        return int(self.calibrator.n_features_out_)

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
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> FlowCalibration:
        hub_kwargs = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
                      "local_files_only": local_files_only}
        config = cls.load_config(model_name_or_path, **hub_kwargs)
        path = cls.load_file_path(model_name_or_path, filename=CALIBRATOR_FILE, **hub_kwargs)
        where = os.path.join(str(model_name_or_path), subfolder)
        if path is None:
            raise CalibratorFileError(f"{where} has no {CALIBRATOR_FILE}: export the model again")

        return cls(FlowCalibrator.load(path, n_features=config.get("n_features_in")))
