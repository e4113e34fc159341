"""The estimator contract every calibrator follows, and its save format.

A calibrator is a scikit-learn-style estimator over embeddings:

- hyper-parameters are set in ``__init__`` and nothing else happens there;
- ``fit(X)`` learns state into attributes ending in ``_`` and returns ``self``;
- ``transform(X)`` maps (n, d) float32 embeddings; it raises :class:`NotFittedError`
  before ``fit``;
- ``save(path)`` writes one ``.npz`` file (arrays plus a JSON header, no pickle), and
  ``load(path)`` restores it, refusing a file of another method or dimension.
"""

from __future__ import annotations

import inspect
import io
import json
import os
from typing import Any, ClassVar, TypeVar

import numpy as np

from flow_plugin._io import atomic_write_bytes
from flow_plugin._validation import check_embeddings
from flow_plugin.errors import CalibratorFileError, InputError, NotFittedError

FILE_FORMAT = "flow-plugin-calibrator"
FILE_VERSION = 1
_HEADER_KEY = "__header__"

#: method name -> class, filled by ``Calibrator.__init_subclass__``
CALIBRATOR_CLASSES: dict[str, type[Calibrator]] = {}

CalibratorT = TypeVar("CalibratorT", bound="Calibrator")
#: methods whose class lives in a module imported only when needed (torch, nflows)
_LAZY_MODULES = {"flow": "flow_plugin.calibration.flow"}


def calibrator_class(method: str) -> type[Calibrator] | None:
    """The class of a calibrator method (importing the flow's module on first use), or ``None``."""
    if method not in CALIBRATOR_CLASSES and method in _LAZY_MODULES:
        import importlib

        importlib.import_module(_LAZY_MODULES[method])
    return CALIBRATOR_CLASSES.get(method)


class Calibrator:
    """Base class. Subclasses set ``method`` and implement ``_fit``/``_transform``
    (and ``_inverse_transform`` where the map is invertible)."""

    #: short name used in model names, files and the registry (``flow``, ``whiten``, ...)
    method: ClassVar[str] = ""
    #: a human-readable label for tables
    label: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.method:
            CALIBRATOR_CLASSES[cls.method] = cls

    # ------------------------------------------------------------ parameters
    @classmethod
    def _param_names(cls) -> list[str]:
        if cls.__init__ is object.__init__:
            return []
        signature = inspect.signature(cls.__init__)
        return [
            name
            for name, parameter in signature.parameters.items()
            if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        ]

    def get_params(self) -> dict[str, Any]:
        """Hyper-parameters as passed to ``__init__``."""
        return {name: getattr(self, name) for name in self._param_names()}

    def clone(self: CalibratorT) -> CalibratorT:
        """A new, unfitted calibrator with the same hyper-parameters."""
        return type(self)(**self.get_params())

    def __repr__(self) -> str:
        params = ", ".join(f"{key}={value!r}" for key, value in self.get_params().items())
        return f"{type(self).__name__}({params})"

    # ------------------------------------------------------------ fitting
    def min_samples(self, n_features: int) -> int:
        """Fewest rows ``fit`` accepts for ``n_features`` dimensions."""
        return 1

    @property
    def is_fitted(self) -> bool:
        return hasattr(self, "n_features_in_")

    def _check_is_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(X) with embeddings before transform"
            )

    def fit(self: CalibratorT, X: Any, y: Any = None) -> CalibratorT:
        """Learn the calibration from embeddings ``X`` of shape (n_samples, n_features)."""
        X = check_embeddings(X, name="X", allow_empty=False)
        n_samples, n_features = X.shape
        self._check_params(n_features)
        needed = self.min_samples(n_features)
        if n_samples < needed:
            raise InputError(
                f"{type(self).__name__} needs at least {needed} samples to fit {n_features}-dimensional "
                f"embeddings, got {n_samples}"
            )
        self._fit(X)
        self.n_features_in_ = n_features
        self.n_samples_fit_ = n_samples
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Calibrated embeddings, float32 (n_samples, n_features_out_)."""
        self._check_is_fitted()
        X = check_embeddings(X, name="X", n_features=self.n_features_in_)
        if X.shape[0] == 0:
            return np.empty((0, self.n_features_out_), dtype=np.float32)
        return np.ascontiguousarray(self._transform(X), dtype=np.float32)

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        return self.fit(X).transform(X)

    def inverse_transform(self, Z: Any) -> np.ndarray:
        """Map calibrated embeddings back to the backbone's space (where the map is invertible)."""
        self._check_is_fitted()
        Z = check_embeddings(Z, name="Z", n_features=self.n_features_out_)
        if Z.shape[0] == 0:
            return np.empty((0, self.n_features_in_), dtype=np.float32)
        return np.ascontiguousarray(self._inverse_transform(Z), dtype=np.float32)

    @property
    def n_features_out_(self) -> int:
        self._check_is_fitted()
        return self.n_features_in_

    # ------------------------------------------------------------ to implement
    def _check_params(self, n_features: int) -> None:
        """Reject hyper-parameters that cannot work for ``n_features`` dimensions."""

    def _fit(self, X: np.ndarray) -> None:
        raise NotImplementedError

    def _transform(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} is not invertible")

    def _get_state(self) -> dict[str, np.ndarray]:
        """Learned arrays (beyond ``n_features_in_``), for ``save``."""
        return {}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``_get_state`` returned."""

    # ------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted calibrator to ``path`` (``.npz``), atomically."""
        self._check_is_fitted()
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "method": self.method,
            "params": self.get_params(),
            "n_features_in": int(self.n_features_in_),
            "n_samples_fit": int(self.n_samples_fit_),
        }
        arrays = {f"state/{key}": np.asarray(value) for key, value in self._get_state().items()}
        buffer = io.BytesIO()
        np.savez(buffer, **{_HEADER_KEY: np.array(json.dumps(header))}, **arrays)
        atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, n_features: int | None = None) -> Calibrator:
        """Read a calibrator written by :meth:`save`.

        Called on a subclass (``Whitening.load``), the file must hold that method; called on
        ``Calibrator``, any method is accepted. ``n_features`` checks the input dimension.
        """
        try:
            with np.load(path, allow_pickle=False) as archive:
                header = json.loads(str(archive[_HEADER_KEY]))
                state = {key[len("state/") :]: archive[key] for key in archive.files if key.startswith("state/")}
        except FileNotFoundError:
            raise CalibratorFileError(f"calibrator file {os.fspath(path)!r} does not exist") from None
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
            raise CalibratorFileError(
                f"{os.fspath(path)!r} is not a readable flow-plugin calibrator file: {error}"
            ) from None
        if header.get("format") != FILE_FORMAT or header.get("version") != FILE_VERSION:
            raise CalibratorFileError(
                f"{os.fspath(path)!r} has format {header.get('format')!r} version {header.get('version')!r}; "
                f"expected {FILE_FORMAT!r} version {FILE_VERSION}"
            )
        method = header["method"]
        if cls.method and method != cls.method:
            raise CalibratorFileError(
                f"{os.fspath(path)!r} holds a {method!r} calibrator, not {cls.method!r} ({cls.__name__})"
            )
        method_class = calibrator_class(method) if isinstance(method, str) else None
        if method_class is None:
            raise CalibratorFileError(f"{os.fspath(path)!r} holds unknown calibrator method {method!r}")
        if n_features is not None and header["n_features_in"] != n_features:
            raise CalibratorFileError(
                f"{os.fspath(path)!r} was fitted on {header['n_features_in']}-dimensional embeddings, "
                f"but {n_features}-dimensional ones were expected"
            )
        calibrator = method_class(**header["params"])
        calibrator.n_features_in_ = int(header["n_features_in"])
        calibrator.n_samples_fit_ = int(header["n_samples_fit"])
        try:
            calibrator._set_state(state)
        except (KeyError, ValueError, RuntimeError) as error:
            raise CalibratorFileError(f"{os.fspath(path)!r} holds an incomplete or inconsistent state: {error}") from None
        return calibrator
