"""BERT-flow's calibrator: the Glow of :mod:`.glow`, fitted by :mod:`.train`, as a
scikit-learn estimator over embeddings. The latent z is the calibrated embedding.

Torch and nflows are imported when a flow is built (:mod:`.members`, the flows' torch side), not
with this module: the registry checks a flow's hyper-parameters without them.
"""

from __future__ import annotations

import logging
import math
import numbers
from types import ModuleType
from typing import Any

import numpy as np
from sklearn.base import clone

from flow_plugin._validation import check_embeddings
from flow_plugin.calibration.base import Calibrator, half_of_span
from flow_plugin.calibration.flow.device_probe import choose_fit_device, fit_device_key, measure_fit_seconds
from flow_plugin.calibration.linear import Whitening
from flow_plugin.errors import InputError

#: see :mod:`.glow` (kept here too so that checking parameters needs no torch)
PERMUTATIONS: tuple[str, ...] = ("reverse", "random", "lu")
COUPLINGS: tuple[str, ...] = ("additive", "affine")

logger = logging.getLogger(__name__)


def _members() -> ModuleType:
    """:mod:`.members`, the torch side of the flows: imported the first time a flow is built, trained, run or
    restored."""
    # torch and nflows load with it, not with this module: the registry checks a flow's parameters without them
    from flow_plugin.calibration.flow import members

    return members


def member_seeds(seed: int, ensemble: int) -> list[int]:
    """The seeds of an ensemble's flows: ``seed * ensemble + m`` for member m. One flow keeps ``seed``
    itself; the members of different seeds never share a seed (the map (seed, m) -> seed * ensemble + m
    is one-to-one), so runs of seeds 1234..1238 are independent, as an interval over seeds needs.

    Examples
    --------
    >>> member_seeds(1234, 5), member_seeds(1235, 5), member_seeds(1234, 1)
    ([6170, 6171, 6172, 6173, 6174], [6175, 6176, 6177, 6178, 6179], [1234])
    """
    return [int(seed) * int(ensemble) + member for member in range(int(ensemble))]


class FlowCalibrator(Calibrator, method="flow"):
    """BERT-flow: map embeddings onto an isotropic Gaussian with a learned invertible flow.

    Parameters (defaults follow the paper and its official code)
    ------------------------------------------------------------
    n_levels, depth, hidden_features:
        3 levels × 3 steps, shift networks 32 wide: the official default config
        ``config_l3_d3_w32`` (run_siamese.py ``--flow_model_config``; paper appendix, table 7).
    permutation:
        ``"reverse"``: the official config's ``"permutation": true`` selects a fixed channel
        reversal instead of Glow's learned 1×1 convolution. ``"random"`` draws a fixed,
        seeded random permutation per step; ``"lu"`` learns the 1×1 convolution (LU form).
    coupling:
        ``"additive"``: the official config's ``"additive": true``; ``"affine"``: Glow's.
    epochs:
        1 pass over the corpus (README of the official code: ``--num_train_epochs=1.0``).
    batch_size:
        64 sentences per step: the official run uses ``train_batch_size=32`` sentence pairs and
        sums the flow loss of both sentences.
    learning_rate, weight_decay:
        Adam with lr 1e-3 (``--flow_learning_rate=1e-3``) and decoupled weight decay 0.01,
        β=(0.9, 0.999), ε=1e-6 (optimization_bert_flow.py's AdamWeightDecayOptimizer).
    clip_grad_norm:
        Global gradient-norm clip at 1.0 (optimization_bert_flow.py ``clip_by_global_norm``).
    init_samples:
        Rows used for the data-dependent ActNorm initialisation. The official code uses its
        first minibatch; up to 1024 rows give a steadier start at no real cost.
    seed:
        1234, the official ``--seed`` default; fixes initial weights, permutations and
        shuffling so a refit gives identical results on the same device.
    whiten_first:
        Whiten the embeddings (a fixed linear map, fitted on the same rows) before the flow, so
        the flow only models what whitening leaves. The whitening keeps only the directions the
        rows span (variance above 1e-9 of the largest); the flow models those, and the dropped
        directions' latent coordinates are 0. ``False``: the paper's flow.
    whiten_components:
        With ``whiten_first``: keep at most this many leading whitened directions (``None``: all
        the rows span). On a small corpus the fit keeps at most half of what the distinct rows span
        (the fitted ``whiten_components_``): n rows whitened on all n - 1 directions they span sit at
        equal distances from each other (their cosines carry nothing but rounding), and ActNorm would
        undo any shrinkage.
    validation_fraction, patience:
        Early stopping: hold out this fraction of the rows (seeded), check their mean
        log-likelihood four times an epoch, stop after ``patience`` checks without a rise and
        keep the best parameters; ``epochs`` is then the most it may train. ``0``: no hold-out,
        exactly ``epochs`` epochs (the paper).
    ensemble:
        Fit this many flows, seeded by :func:`member_seeds` (``seed * ensemble + m``: the members of
        two seeds never overlap, so seeds are independent runs); the calibrated embedding
        concatenates their latents, each scaled to unit length and by ``1/sqrt(ensemble)``,
        so a cosine in it is the mean of the flows' cosines. ``1``: one flow (the paper).
    fast_path:
        Train the paper's flow (fixed permutation, additive couplings) through the fused
        trainer of :mod:`._fast` (same arithmetic, about twice as fast). A warning says so
        when the flow's structure rules it out; ``False`` always trains through autograd.
    device:
        ``None``/``"auto"``: on a machine with a CUDA device, the CPU or the GPU, whichever a short probe measured
        fitting a flow of this shape faster (cached per machine: :mod:`.device_probe`); the CPU elsewhere.
        ``fit_device_choice_`` says which and why.
    show_progress_bar:
        ``None`` shows a bar for long fits.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(600, 8)).astype(np.float32) * 3 + 1
    >>> flow = FlowCalibrator(n_levels=2, show_progress_bar=False).fit(X)
    >>> flow.transform(X).shape, flow.fit_log_likelihood_ > flow.initial_log_likelihood_
    ((600, 8), True)
    """

    EFFECTIVE_ATTRIBUTES = ("whiten_components_",)

    def __init__(
        self,
        n_levels: int = 3,
        depth: int = 3,
        hidden_features: int = 32,
        permutation: str = "reverse",
        coupling: str = "additive",
        epochs: float = 1.0,
        batch_size: int = 64,
        learning_rate: float = 1e-3,
        weight_decay: float = 0.01,
        clip_grad_norm: float = 1.0,
        init_samples: int = 1024,
        seed: int = 1234,
        whiten_first: bool = False,
        whiten_components: int | None = None,
        validation_fraction: float = 0.0,
        patience: int = 2,
        ensemble: int = 1,
        fast_path: bool = True,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.n_levels = n_levels
        self.depth = depth
        self.hidden_features = hidden_features
        self.permutation = permutation
        self.coupling = coupling
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.clip_grad_norm = clip_grad_norm
        self.init_samples = init_samples
        self.seed = seed
        self.whiten_first = whiten_first
        self.whiten_components = whiten_components
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.ensemble = ensemble
        self.fast_path = fast_path
        self.device = device
        self.show_progress_bar = show_progress_bar

    # ------------------------------------------------------------ construction
    def min_samples(self, n_features: int) -> int:
        return 2  # ActNorm's data-dependent initialisation needs a standard deviation

    def _adapt_to_sample(self, n_distinct: int, n_features: int) -> str | None:
        """With ``whiten_first``, the whitening keeps at most half of the ``n_distinct - 1`` directions the
        rows span (``whiten_components_``); the paper's flow is unchanged (``whiten_components_`` is None).

        Examples
        --------
        >>> flow = FlowCalibrator(whiten_first=True)
        >>> flow._adapt_to_sample(201, 384), flow.whiten_components_
        ('whitening first on all the directions 201 distinct rows span would leave their cosines nothing but rounding: whiten_components_=100 (half of them)', 100)
        >>> flow._adapt_to_sample(5000, 384) is None, flow.whiten_components_
        (True, None)
        """
        self.whiten_components_ = self.whiten_components if self.whiten_first else None
        limit = max(1, half_of_span(n_distinct))
        if not self.whiten_first or limit >= min(n_features, self.whiten_components or n_features):
            return None
        self.whiten_components_ = limit
        return (f"whitening first on all the directions {n_distinct} distinct rows span would leave their cosines "
                f"nothing but rounding: whiten_components_={limit} (half of them)")

    def _check_params(self, n_features: int) -> None:
        if self.permutation not in PERMUTATIONS:
            raise InputError(f"permutation must be one of {PERMUTATIONS}, got {self.permutation!r}")
        if self.coupling not in COUPLINGS:
            raise InputError(f"coupling must be one of {COUPLINGS}, got {self.coupling!r}")
        if not isinstance(self.whiten_first, bool):
            raise InputError(f"FlowCalibrator whiten_first must be True or False, got {self.whiten_first!r}")
        if isinstance(self.validation_fraction, bool) or not isinstance(self.validation_fraction, numbers.Real) or not (
            0 <= self.validation_fraction < 0.5
        ):
            raise InputError(f"FlowCalibrator validation_fraction must be in [0, 0.5), got {self.validation_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise InputError(f"FlowCalibrator seed must be an int >= 0, got {self.seed!r}")
        for name in ("n_levels", "depth", "hidden_features", "batch_size", "init_samples", "patience", "ensemble"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise InputError(f"FlowCalibrator {name} must be a positive int, got {value!r}")
        if self.whiten_components is not None and (
            isinstance(self.whiten_components, bool) or not isinstance(self.whiten_components, numbers.Integral)
            or not 1 <= self.whiten_components <= n_features
        ):
            raise InputError(f"FlowCalibrator whiten_components must be None or an int in 1..{n_features}, "
                             f"got {self.whiten_components!r}")
        if not self.epochs > 0 or not self.learning_rate > 0:
            raise InputError("FlowCalibrator epochs and learning_rate must be > 0")
        smallest_level = n_features // 2 ** (self.n_levels - 1)
        if smallest_level < 2:
            raise InputError(
                f"{n_features}-dimensional embeddings ({n_features} feature(s)) are too small for {self.n_levels} "
                f"levels: the last level would see {smallest_level} feature(s); use fewer levels"
            )

    def _build(self, n_features: int, seed: int | None = None) -> Any:
        """The untrained flow (an nflows ``Flow``), its random start fixed by ``seed``."""
        # plain Python numbers (torch refuses NumPy integers as sizes and seeds)
        return _members().seeded_flow(n_features, int(self.seed if seed is None else seed),
                                      n_levels=int(self.n_levels), depth=int(self.depth),
                                      hidden_features=int(self.hidden_features), permutation=self.permutation,
                                      coupling=self.coupling)

    def _settings(self, seed: int) -> Any:
        """How member ``seed`` trains (:class:`.train.TrainingSettings`), in plain Python numbers."""
        return _members().TrainingSettings(
            epochs=float(self.epochs), batch_size=int(self.batch_size), learning_rate=float(self.learning_rate),
            weight_decay=float(self.weight_decay), clip_grad_norm=self.clip_grad_norm,
            init_samples=int(self.init_samples), seed=int(seed))

    # ------------------------------------------------------------ fitting
    def _fit(self, X: np.ndarray) -> None:
        n_samples, n_features = X.shape
        if not np.ptp(X, axis=0).any():
            raise InputError(f"FlowCalibrator: the {n_samples} samples are all identical; there is nothing to fit")
        if n_samples < n_features:
            logger.warning(
                "fitting a flow on %d sentences for %d-dimensional embeddings: expect a poor fit", n_samples, n_features
            )
        self.n_flow_features_ = n_features
        if self.whiten_first:
            # the sample covariance's whitening, keeping only the directions the rows span: a null direction
            # (fewer rows than dimensions, or one the backbone never uses: all-MiniLM-L6-v2 has 3 of 384) holds
            # only rounding error, which ActNorm's data-dependent scale would blow up to unit variance
            kept = min(n_features, n_samples - 1, self.whiten_components_ or n_features)
            self.whitening_ = Whitening(n_components=kept).fit(X)
            self.n_flow_features_ = self.whitening_.output_width(n_features) - self.whitening_.n_degenerate_
            smallest_level = self.n_flow_features_ // 2 ** (self.n_levels - 1)
            if smallest_level < 2:
                raise InputError(
                    f"FlowCalibrator with whiten_first: the {n_samples} rows span only {self.n_flow_features_} "
                    f"directions, too few for {self.n_levels} levels; fit on more sentences or use fewer levels"
                )
            X = self._inputs(X)
        self.fit_device_choice_ = self._choose_fit_device(self.n_flow_features_)
        logger.info("flow fit device %s", self.fit_device_choice_.describe())
        self.member_seeds_ = member_seeds(self.seed, self.ensemble)
        results = [self._fit_member(X, seed) for seed in self.member_seeds_]
        self.flows_ = [flow for flow, _, _ in results]
        self.flow_ = self.flows_[0]
        first = results[0][1]
        self.loss_curve_ = first.loss_curve
        self.n_steps_ = first.n_steps
        self.fast_path_used_ = first.fast_path
        self.validation_curve_ = first.validation_curve
        self.best_step_ = first.best_step
        self.initial_log_likelihood_ = float(np.mean([result.initial_log_likelihood for _, result, _ in results]))
        self.initial_log_likelihood_ += self._log_det()  # both likelihoods in the input space
        self.fit_log_likelihood_ = float(np.mean([likelihood for _, _, likelihood in results])) + self._log_det()
        self.fit_bits_per_dim_ = -self.fit_log_likelihood_ / (n_features * math.log(2))

    def _fit_member(self, X: np.ndarray, seed: int) -> tuple[Any, Any, float]:
        """One flow, seeded ``seed``: (flow, training result, mean log-likelihood of the rows it trained on)."""
        flow = self._build(self.n_flow_features_, seed)
        result, likelihood = _members().fit_member(
            X, flow, self._settings(seed), device=self.fit_device_choice_.device,
            validation_fraction=self.validation_fraction, patience=self.patience, fast_path=self.fast_path,
            show_progress_bar=self.show_progress_bar)
        return flow, result, likelihood

    def _choose_fit_device(self, width: int) -> Any:
        """Where this flow fits (:func:`.device_probe.choose_fit_device`): measured by fitting a copy of it on
        synthetic rows of ``width`` on each device, where ``device`` is ``None``/``"auto"`` and CUDA is there."""
        params = self.get_params()
        return choose_fit_device(self.device, lambda: fit_device_key(width, params), lambda: measure_fit_seconds(
            lambda device, rows, epochs: self._probe_fit(device, width, rows, epochs)))

    def _probe_fit(self, device: str, width: int, rows: int, epochs: float) -> None:
        """Fit a copy of this flow (one member, no validation split) on ``rows`` synthetic Gaussian rows of
        ``width`` on ``device``, and wait for the device."""
        X = np.random.default_rng(0).normal(size=(rows, width)).astype(np.float32)
        copy = clone(self).set_params(device=device, epochs=epochs, ensemble=1, validation_fraction=0.0,
                                      whiten_first=False, show_progress_bar=False)
        copy.fit(X)
        _members().wait_for(device)

    def _log_det(self) -> float:
        """log|det| of the fixed whitening on the directions it keeps (0 without it): likelihoods in the
        input space (in the subspace the fit rows span, where whitening drops null directions)."""
        if not self.whiten_first:
            return 0.0
        kept = self.whitening_.explained_variance_[: self.n_flow_features_]
        return float(-0.5 * np.log(kept.astype(np.float64)).sum())

    def output_width(self, n_features: int) -> int:
        # whitening first drops null directions; their latent coordinates are 0, so the width stays
        return n_features * self.ensemble

    # ------------------------------------------------------------ inference

    def _inputs(self, X: np.ndarray) -> np.ndarray:
        """What the flow models: ``X``, or its whitened coordinates on the spanned directions."""
        if not self.whiten_first:
            return X
        return np.ascontiguousarray(self.whitening_.transform(X)[:, : self.n_flow_features_])

    def _padded(self, Z: np.ndarray) -> np.ndarray:
        """Latents of the flow's width, with 0 for the directions whitening dropped."""
        missing = self.n_features_in_ - Z.shape[1]
        return Z if missing == 0 else np.pad(Z, ((0, 0), (0, missing)))

    def _transform(self, X: np.ndarray) -> np.ndarray:
        X = self._inputs(X)
        latents = [self._padded(_members().run_rows(flow, X, flow.transform_to_noise)) for flow in self.flows_]
        if len(latents) == 1:
            return latents[0]
        scaled = [z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12) for z in latents]
        return np.concatenate(scaled, axis=1) / math.sqrt(len(latents))

    def _inverse_transform(self, Z: np.ndarray) -> np.ndarray:
        if self.ensemble > 1:
            raise NotImplementedError("an ensemble of flows is not invertible (its latents are normalised)")
        X = _members().inverse_rows(self.flow_, np.ascontiguousarray(Z[:, : self.n_flow_features_]))
        if not self.whiten_first:
            return X
        kept = self.whitening_.output_width(self.n_features_in_)
        return self.whitening_.inverse_transform(np.pad(X, ((0, 0), (0, kept - X.shape[1]))))

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-likelihood of each row under the fitted flow (nats)."""
        self._check_is_fitted()
        X = check_embeddings(X, name="X", n_features=self.n_features_in_, owner=type(self).__name__)
        if X.shape[0] == 0:
            return np.empty((0,), dtype=np.float64)
        inputs = self._inputs(X)
        each = np.stack([_members().run_rows(flow, inputs, flow.log_prob).astype(np.float64) for flow in self.flows_])
        # an ensemble is the equal mixture of its flows: log of the mean density
        peak = each.max(axis=0)
        mixture = peak + np.log(np.exp(each - peak).mean(axis=0))
        return mixture + self._log_det()

    def score(self, X: Any, y: Any = None) -> float:
        """Mean log-likelihood of ``X`` (nats per sample), as scikit-learn density models do."""
        return float(self.score_samples(X).mean())

    def bits_per_dim(self, X: Any) -> float:
        """Negative mean log-likelihood in bits per dimension."""
        return -self.score(X) / (self.n_features_in_ * math.log(2))

    # ------------------------------------------------------------ persistence
    def _get_state(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {}
        for member, flow in enumerate(self.flows_):
            prefix = "flow/" if member == 0 else f"flow{member}/"
            state.update({prefix + key: value.detach().cpu().numpy() for key, value in flow.state_dict().items()})
        if self.whiten_first:
            state.update({f"whitening/{key}": value for key, value in self.whitening_._get_state().items()})
        state["loss_curve"] = self.loss_curve_
        state["fit_log_likelihood"] = np.float64(self.fit_log_likelihood_)
        state["initial_log_likelihood"] = np.float64(self.initial_log_likelihood_)
        return state

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        n_features = self.n_features_in_
        self._check_params(n_features)
        self.whiten_components_ = self.whiten_components if self.whiten_first else None  # the header may say more
        if self.whiten_first:
            self.whitening_ = Whitening()
            self.whitening_._set_state({key[len("whitening/"):]: value for key, value in state.items()
                                        if key.startswith("whitening/")})
            self.whitening_.n_components = int(self.whitening_.components_.shape[1])
            self.whitening_.n_features_in_, self.whitening_.n_samples_fit_ = n_features, self.n_samples_fit_
        self.n_flow_features_ = (self.whitening_.output_width(n_features) - self.whitening_.n_degenerate_
                                 if self.whiten_first else n_features)
        self.member_seeds_ = member_seeds(self.seed, self.ensemble)
        self.flows_ = []
        for member in range(self.ensemble):
            prefix = "flow/" if member == 0 else f"flow{member}/"
            flow = self._build(self.n_flow_features_, self.member_seeds_[member])
            weights = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
            self.flows_.append(_members().restored(flow, weights, self.device))
        self.flow_ = self.flows_[0]
        self.loss_curve_ = state["loss_curve"]
        self.n_steps_ = int(len(self.loss_curve_))
        self.fit_log_likelihood_ = float(state["fit_log_likelihood"])
        self.initial_log_likelihood_ = float(state["initial_log_likelihood"])
        self.fit_bits_per_dim_ = -self.fit_log_likelihood_ / (n_features * math.log(2))
