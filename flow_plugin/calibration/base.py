"""The estimator contract every calibrator follows, and its save format.

A calibrator is a scikit-learn transformer (``BaseEstimator`` + ``TransformerMixin``) over
embeddings:

- hyper-parameters are set in ``__init__`` and nothing else happens there, so sklearn's
  ``get_params``/``set_params``/``clone`` work as for any estimator;
- ``fit(X)`` learns state into attributes ending in ``_`` and returns ``self``; the values a fit
  runs with where the data decides them (the small-sample rule: ``n_components_``,
  ``shrinkage_``, ...) are fitted attributes too, and the hyper-parameters stay as set;
- ``fit`` refuses, with one :class:`CalibrationError` naming the remedy, a fit whose cosines
  would be rounding noise (:mod:`flow_plugin.calibration.stability`), so every route that fits
  a calibrator, the plain estimator included, gets the same safe result;
- ``transform(X)`` maps (n, d) float32 embeddings; it raises :class:`NotFittedError`
  (found by sklearn's ``check_is_fitted``) before ``fit``;
- ``save(path)`` writes one ``.npz`` file (arrays plus a JSON header, no pickle), and
  ``load(path)`` restores it, refusing a file of another method or dimension, and any
  unreadable file with :class:`CalibratorFileError` naming it.

Examples
--------
>>> import numpy as np
>>> from flow_plugin.calibration import make_calibrator
>>> X = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
>>> sn = make_calibrator("sn").fit(X)
>>> sn.transform(X).shape, sn.get_params(), sn.n_features_in_
((100, 4), {}, 4)
"""

from __future__ import annotations

import io
import json
import logging
import os
import zipfile
from typing import Any, ClassVar, TypeVar

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.base import clone as sklearn_clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils.validation import check_is_fitted

from flow_plugin._io import atomic_write_bytes, plain_json_value
from flow_plugin._validation import check_embeddings
from flow_plugin.calibration.names import CALIBRATOR_LABELS, resolve_name
from flow_plugin.calibration.stability import MIN_COSINE_STABILITY, is_rounding_noise
from flow_plugin.errors import CalibrationError, CalibratorFileError, InputError, InputTypeError, NotFittedError, did_you_mean

logger = logging.getLogger(__name__)

FILE_FORMAT = "flow-plugin-calibrator"
FILE_VERSION = 1
_HEADER_KEY = "__header__"

#: method name -> class: each class enters it by declaring its method (``class Whitening(Calibrator,
#: method="whiten")``, see :meth:`Calibrator.__init_subclass__`); :func:`flow_plugin.calibration.calibrator_class`
#: loads the modules that declare them
CALIBRATOR_CLASSES: dict[str, type[Calibrator]] = {}

CalibratorT = TypeVar("CalibratorT", bound="Calibrator")


def class_by_name(name: str) -> type[Calibrator] | None:
    """The registered class of a method or variant name, or ``None`` for a name no loaded class declares."""
    try:
        method, _ = resolve_name(name)
    except KeyError:
        return None
    return CALIBRATOR_CLASSES.get(method)


def calibrator_by_name(name: str, **params: Any) -> Calibrator | None:
    """An unfitted calibrator of a registered class by method or variant name (the variant's preset, then
    ``params``), or ``None`` for a name no loaded class declares."""
    cls = class_by_name(name)
    if cls is None:
        return None
    unknown = sorted(set(params) - set(cls._get_param_names()))
    if unknown:
        accepted = cls._get_param_names()
        hints = [f"{key!r}{did_you_mean(key, accepted)}" for key in unknown]
        raise InputTypeError(f"calibrator {name!r} has no hyper-parameter {', '.join(hints)}; its hyper-parameters: "
                         f"{', '.join(accepted) or 'none'}")
    return cls(**{**resolve_name(name)[1], **params})


def half_of_span(n_distinct: int) -> int:
    """The small-sample rule's one limit: how many directions a calibrator may null or rescale on a fit
    corpus of ``n_distinct`` distinct rows, half of the ``n_distinct - 1`` they span. Rescaling all of
    them sets every row at the same distance from every other, so that cosines keep nothing but
    rounding; nulling them all leaves nothing to compare.

    Examples
    --------
    >>> half_of_span(201), half_of_span(1)
    (100, 0)
    """
    return max(0, (n_distinct - 1) // 2)


def count_distinct_rows(X: np.ndarray) -> int:
    """How many distinct rows ``X`` has (rows compared bit for bit): the small-sample rule's n.

    Examples
    --------
    >>> count_distinct_rows(np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 1.0]], dtype=np.float32))
    2
    """
    rows = np.ascontiguousarray(X)
    return int(np.unique(rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))).shape[0])


class Calibrator(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
    """Base class. A calibrator class declares its method (``class Whitening(Calibrator, method="whiten")``),
    which enters it in the registry, and implements ``_fit``/``_transform`` (and ``_inverse_transform``
    where the map is invertible)."""

    #: short name used in model names, files and the registry (``flow``, ``whiten``, ...), as declared
    method: ClassVar[str] = ""
    #: a human-readable label for tables (:data:`~flow_plugin.calibration.names.CALIBRATOR_LABELS`)
    label: ClassVar[str] = ""

    def __init_subclass__(cls, method: str | None = None, **kwargs: Any) -> None:
        """Enter a class that declares ``method`` in :data:`CALIBRATOR_CLASSES`: one of the methods of
        :data:`~flow_plugin.calibration.names.CALIBRATOR_LABELS`, each declared by one class."""
        # embeddings leave as float32 arrays whatever scikit-learn's output config says (no set_output wrapping):
        # the MTEB, SentEval and export routes read them as arrays, also under a user's transform_output="pandas"
        super().__init_subclass__(**{"auto_wrap_output_keys": None, **kwargs})
        if method is None:
            return  # a subclass of a calibrator keeps its method and does not replace it in the registry
        if method not in CALIBRATOR_LABELS:
            raise TypeError(f"{cls.__name__} declares method {method!r}, which calibration/names.py does not name "
                            f"(known: {', '.join(CALIBRATOR_LABELS)})")
        held = CALIBRATOR_CLASSES.get(method)
        if held is not None and held.__qualname__ != cls.__qualname__:  # (a module reloaded redeclares its class)
            raise TypeError(f"{cls.__name__} declares method {method!r}, already declared by {held.__name__}")
        cls.method, cls.label = method, CALIBRATOR_LABELS[method]
        CALIBRATOR_CLASSES[method] = cls

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]  # embeddings come back as float32 whatever comes in
        tags.input_tags.allow_nan = False
        return tags

    # ------------------------------------------------------------ parameters
    def clone(self: CalibratorT) -> CalibratorT:
        """A new, unfitted calibrator with the same hyper-parameters (``sklearn.base.clone``)."""
        return sklearn_clone(self)

    #: hyper-parameters that say where or how visibly a fit runs, not what it computes
    RUNTIME_PARAMS: ClassVar[tuple[str, ...]] = ("device", "show_progress_bar")

    def identity_params(self) -> dict[str, Any]:
        """What names this calibrator's results beside its name and the hyper-parameters a user set (the MTEB
        experiment kwargs add it): none here; a calibrator whose result depends on more (``auto``'s table) says so."""
        return {}

    def result_params(self) -> dict[str, Any]:
        """The hyper-parameters that shape the result (all but :attr:`RUNTIME_PARAMS`), defaults included."""
        return {key: value for key, value in self.get_params(deep=False).items() if key not in self.RUNTIME_PARAMS}

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:  # noqa: N803 -- sklearn's signature
        # every hyper-parameter, defaults included: a logged repr says exactly what was fitted
        params = ", ".join(f"{key}={value!r}" for key, value in self.get_params(deep=False).items())
        return f"{type(self).__name__}({params})"

    # ------------------------------------------------------------ fitting
    #: the fitted attributes that hold values the data decided (the small-sample rule), recorded with each fit
    EFFECTIVE_ATTRIBUTES: ClassVar[tuple[str, ...]] = ()

    def min_samples(self, n_features: int) -> int:
        """Fewest rows ``fit`` accepts for ``n_features`` dimensions (with the effective values, once set)."""
        return 1

    def min_samples_remedy(self) -> str:
        """What to do about too few rows, beyond fitting on more (one clause, or empty)."""
        return ""

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        """The small-sample rule: set the effective values (:attr:`EFFECTIVE_ATTRIBUTES`) for a fit on
        ``n_distinct`` distinct rows of ``n_features`` dimensions, and say why they differ from the
        hyper-parameters (``None``: they don't).

        Calibrators whose size outgrows a small corpus shrink to what it supports instead of failing or
        degenerating, each by the same limit (:func:`half_of_span`): whitening and soft whitening fall back to
        Ledoit-Wolf shrinkage when they would rescale more than half of the directions the distinct rows span, NATSV
        nulls at most half of them, and a whitening-first flow whitens at most half of them. Every other
        calibrator is unchanged (fewer than 2 distinct rows stay an error).
        """
        return None

    def effective_params(self) -> dict[str, Any]:
        """The values the fit ran with where the data decided them (``{"n_components_": 88}``; empty
        for a calibrator without any)."""
        self._check_is_fitted()
        return {name: getattr(self, name, None) for name in self.EFFECTIVE_ATTRIBUTES}

    @property
    def is_fitted(self) -> bool:
        return hasattr(self, "n_features_in_")

    def _check_is_fitted(self) -> None:
        try:
            check_is_fitted(self, "n_features_in_")
        except SklearnNotFittedError:
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(X) with embeddings before transform"
            ) from None

    def fit(self: CalibratorT, X: Any, y: Any = None) -> CalibratorT:
        """Learn the calibration from embeddings ``X`` of shape (n_samples, n_features).

        The small-sample rule (:meth:`_adapt_to_sample`) first sets the effective values from the number
        of distinct rows (``adapted_`` says why they differ from the hyper-parameters, and a warning is
        logged); after fitting, the calibrated cosines' stability under bf16-size rounding is measured
        (``cosine_stability_``) and a space of rounding noise is refused with :class:`CalibrationError`.
        """
        X = check_embeddings(X, name="X", allow_empty=False)
        n_samples, n_features = X.shape
        self._check_params(n_features)
        for name in ("n_features_in_", "adapted_", "cosine_stability_"):  # a refit starts unfitted
            self.__dict__.pop(name, None)
        n_distinct = count_distinct_rows(X)
        adapted = self._adapt_to_sample(n_distinct, n_features)
        if adapted:
            logger.warning("%s: %s", type(self).__name__, adapted)
        needed = self.min_samples(n_features)
        if n_samples < needed:
            remedy = self.min_samples_remedy()
            raise InputError(
                f"{type(self).__name__} needs at least {needed} samples to fit {n_features}-dimensional "
                f"embeddings, got {n_samples} sample(s); fit on more sentences{', or ' + remedy if remedy else ''}"
            )
        self._fit(X)
        self.n_features_in_ = n_features
        self.n_samples_fit_ = n_samples
        self.n_distinct_fit_ = n_distinct
        refused, stability, raw = is_rounding_noise(self, X)
        if refused:
            del self.n_features_in_  # nothing unsound stays usable
            raw_figure = "" if raw is None else f" against {raw:.4f} raw"
            raise CalibrationError(
                f"{self.method} fitted on {n_samples} samples ({n_distinct} distinct, {n_features} dimensions) "
                f"gives cosines dominated by near-null directions: rounding the embeddings as bf16 does reorders "
                f"them (rank correlation {stability:.2f}{raw_figure}, at least {MIN_COSINE_STABILITY} needed); fit "
                "on more sentences or use another calibrator for this corpus"
            )
        self.adapted_ = adapted
        self.cosine_stability_ = stability
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Calibrated embeddings, float32 (n_samples, n_features_out_)."""
        self._check_is_fitted()
        X = check_embeddings(X, name="X", n_features=self.n_features_in_, owner=type(self).__name__)
        if X.shape[0] == 0:
            return np.empty((0, self.n_features_out_), dtype=np.float32)
        return np.ascontiguousarray(self._transform(X), dtype=np.float32)

    def inverse_transform(self, Z: Any) -> np.ndarray:
        """Map calibrated embeddings back to the backbone's space (where the map is invertible)."""
        self._check_is_fitted()
        Z = check_embeddings(Z, name="Z", n_features=self.n_features_out_, owner=type(self).__name__)
        if Z.shape[0] == 0:
            return np.empty((0, self.n_features_in_), dtype=np.float32)
        return np.ascontiguousarray(self._inverse_transform(Z), dtype=np.float32)

    @property
    def n_features_out_(self) -> int:
        self._check_is_fitted()
        return self.output_width(self.n_features_in_)

    @property
    def _n_features_out(self) -> int:
        """scikit-learn's name of the output width, which ``get_feature_names_out`` reads."""
        return self.n_features_out_

    def output_width(self, n_features: int) -> int:
        """Width of the calibrated embeddings for ``n_features``-dimensional inputs (known before ``fit``)."""
        return n_features

    # ------------------------------------------------------------ to implement
    def check_params(self, n_features: int) -> None:
        """Refuse, with :class:`~flow_plugin.errors.InputError`, hyper-parameters that cannot fit
        ``n_features``-dimensional embeddings: what :meth:`fit` checks first, callable before any data is at hand."""
        self._check_params(n_features)

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
    def _fit_record_attributes(self) -> tuple[str, ...]:
        """The fitted attributes of plain JSON values that a saved file keeps in its header."""
        return (*self.EFFECTIVE_ATTRIBUTES, "n_distinct_fit_", "adapted_", "cosine_stability_")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the fitted calibrator to ``path`` (``.npz``), atomically."""
        self._check_is_fitted()
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "method": self.method,
            "params": self.get_params(deep=False),
            "n_features_in": int(self.n_features_in_),
            "n_samples_fit": int(self.n_samples_fit_),
            "fit": {name: getattr(self, name, None) for name in self._fit_record_attributes()},
        }
        arrays = {f"state/{key}": np.asarray(value) for key, value in self._get_state().items()}
        buffer = io.BytesIO()
        np.savez(buffer, **{_HEADER_KEY: np.array(json.dumps(header, default=plain_json_value))}, **arrays)
        atomic_write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, n_features: int | None = None) -> Calibrator:
        """Read a calibrator written by :meth:`save`.

        Called on a subclass (``Whitening.load``), the file must hold that method; called on
        ``Calibrator``, any method is accepted. ``n_features`` checks the input dimension. A
        missing, empty, truncated or corrupted file raises :class:`CalibratorFileError`
        naming it.
        """
        where = repr(os.fspath(path))
        try:
            with np.load(path, allow_pickle=False) as archive:
                header = json.loads(str(archive[_HEADER_KEY]))
                state = {key[len("state/") :]: archive[key] for key in archive.files if key.startswith("state/")}
        except FileNotFoundError:
            raise CalibratorFileError(f"calibrator file {where} does not exist") from None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as error:
            problem = "is empty" if os.path.isfile(path) and os.path.getsize(path) == 0 else "is truncated or corrupted"
            raise CalibratorFileError(
                f"{where} is not a readable flow-plugin calibrator file: it {problem} "
                f"({type(error).__name__}: {error}); fit and save the calibrator again"
            ) from None
        if not isinstance(header, dict):
            raise CalibratorFileError(f"{where} is not a readable flow-plugin calibrator file: its header is not an object")
        if header.get("format") != FILE_FORMAT or header.get("version") != FILE_VERSION:
            raise CalibratorFileError(
                f"{where} has format {header.get('format')!r} version {header.get('version')!r}; "
                f"expected {FILE_FORMAT!r} version {FILE_VERSION}"
            )
        method = header.get("method")
        if cls.method and method != cls.method:
            raise CalibratorFileError(f"{where} holds a {method!r} calibrator, not {cls.method!r} ({cls.__name__})")
        method_class = CALIBRATOR_CLASSES.get(method) if isinstance(method, str) else None
        if method_class is None:
            raise CalibratorFileError(f"{where} holds unknown calibrator method {method!r} (load files with the classes "
                                      "of flow_plugin.calibration)")
        if n_features is not None and header.get("n_features_in") != n_features:
            raise CalibratorFileError(
                f"{where} was fitted on {header.get('n_features_in')}-dimensional embeddings, "
                f"but {n_features}-dimensional ones were expected"
            )
        try:
            calibrator = method_class(**header["params"])
            calibrator.n_features_in_ = int(header["n_features_in"])
            calibrator.n_samples_fit_ = int(header["n_samples_fit"])
            calibrator._set_state(state)
            recorded = header.get("fit", {})  # files written before these existed lack them
            for name in calibrator._fit_record_attributes():
                if name in recorded:
                    setattr(calibrator, name, recorded[name])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise CalibratorFileError(f"{where} holds an incomplete or inconsistent state: {error}") from None
        return calibrator
