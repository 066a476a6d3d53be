"""The `covarep` feature's array kernels in torch: the same arithmetic as the numpy/scipy/librosa reference
(extractors/acoustic.py, extractors/glottal.py), batched over frames, rows and cycles, on a CPU or CUDA device.

What runs here is what the profile of a 60 s clip found to dominate (docs/scale.md, "Issue 37"): WORLD's F0
(DIO + StoneMask, extractors/world_f0.py), the frame-wise LPC of IAIF and GFM-IAIF, the time-varying inverse
filters, the wavelet bands of peak slope and MDQ, the normalised cross-correlations of the voicing and F0 steps,
the spectra of the per-cycle and per-row glottal measures, the MFCC, and for the 74-column layout the 3-period
spectra, MCEP's true envelope, HMPD's time smoothing and Rd_conf. What stays on the CPU in every backend is
sequential by nature or small: the zero-phase IIR filters (scipy), the F0-guided walk from one glottal closure to
the next, Harvest (pyworld, where chosen), and the bookkeeping between the kernels (which rows are voiced, runs,
segments): that glue is the reference's own code (`acoustic.Kernels` takes these functions in place of the numpy
ones), so the columns, rows and NaN rules cannot drift apart.

Everything is float64 where the reference is (MCEP's envelope and HMPD's smoothing are float32 in both): the
outputs then differ from it by summation order only, within the tolerances the reference's own noise sets (docs/acoustic.md, "Torch backend"). An H100 runs float64 at half
its float32 vector rate, so nothing is gained by giving that up. Arrays cross the kernel boundary as numpy (the
glue is numpy); on CUDA that is one host-device copy of the block's signal per kernel call (about 4 MB).

This module imports neither `extractors.acoustic` nor anything that does: acoustic.py imports it when the config
asks for the torch backend.
"""

from __future__ import annotations

import functools

import librosa
import numpy as np
import scipy.fft
import torch
from scipy.signal import lfilter

from extractors import glottal, harmonics, hmpd, mcep, rd_conf, srh, world_f0

# Elements (rows x offsets x samples) one chunk of an NCCF or spectrum batch may hold: bounds the memory of a
# long block (about 256 MB of float64 at most) without splitting the work into calls too small for a GPU.
CHUNK_ELEMENTS = 1 << 25


def resolve_device(requested: str, given: str) -> torch.device:
    """The torch device: `requested` from the config ("auto" = `given`, the device the pipeline placed the
    extractor on, falling back to the CPU where torch sees no CUDA)."""
    name = given if requested == "auto" else requested
    if torch.device(name).type == "cuda" and not torch.cuda.is_available():
        if requested == "cuda":
            raise RuntimeError("covarep: device = 'cuda' but torch sees no CUDA device (use 'auto' or 'cpu')")
        name = "cpu"
    return torch.device(name)


class TorchKernels:
    """The kernels of `acoustic.Kernels`, numpy in and out, computed in torch on `device`."""

    def __init__(self, device: torch.device, hop: int, fs: int) -> None:
        self.device, self.hop, self.fs = device, hop, fs

    # -- helpers ------------------------------------------------------------------------------------------------
    def _t(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        if isinstance(x, torch.Tensor):
            return x.to(self.device)
        return torch.as_tensor(np.ascontiguousarray(x), device=self.device)  # (filtfilt gives reversed views)

    def _windows(self, x: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
        """glottal.windows: (len(starts), length) copies of x[s : s + length], zero outside x."""
        idx = starts[:, None] + torch.arange(length, device=self.device)[None]
        valid = (idx >= 0) & (idx < x.numel())
        return torch.where(valid, x[idx.clamp(0, x.numel() - 1)], torch.zeros((), dtype=x.dtype, device=self.device))

    @functools.cache  # noqa: B019 (one kernel set per device lives as long as the process)
    def _hanning(self, n: int) -> torch.Tensor:
        return self._t(np.hanning(n))

    # -- F0 -------------------------------------------------------------------------------------------------------
    def dio(self, y: np.ndarray, fs: int, f0_floor: float, f0_ceil: float, frame_period_ms: float,
            speed: int) -> np.ndarray:  # fmt: skip
        """acoustic.world_dio: WORLD's DIO + StoneMask (extractors/world_f0.py)."""
        return world_f0.dio_stonemask(self._t(y), fs, f0_floor, f0_ceil, frame_period_ms, speed).cpu().numpy()

    # -- LPC and inverse filters ----------------------------------------------------------------------------------
    def _lpc(self, frames: torch.Tensor, order: int, window: bool = True) -> torch.Tensor:
        """glottal.lpc_rows ("autocorrelation"): Levinson-Durbin on the Hann-windowed rows' autocorrelation
        (`window=False`: on the rows as given)."""
        win = frames * self._hanning(frames.shape[1]) if window else frames
        n = win.shape[1]
        r = torch.stack([(win[:, k:] * win[:, : n - k]).sum(1) for k in range(order + 1)], dim=1)
        a = torch.zeros((len(win), order + 1), dtype=win.dtype, device=self.device)
        a[:, 0] = 1.0
        err = r[:, 0] * (1 + 1e-9)
        for i in range(1, order + 1):
            k = -(r[:, i] + (a[:, 1:i] * r[:, 1:i].flip(1)).sum(1)) / err
            a[:, 1:i] = a[:, 1:i] + k[:, None] * a[:, 1:i].flip(1)
            a[:, i] = k
            err = err * (1 - k * k)
        bad = ~torch.isfinite(a).all(1)
        a[bad] = 0.0
        a[bad, 0] = 1.0
        return a

    @staticmethod
    def _fir(a: torch.Tensor, ext: torch.Tensor) -> torch.Tensor:
        """glottal._fir_rows: row-wise FIR, ext holding `order` samples of history before each frame."""
        return (ext.unfold(1, a.shape[1], 1) @ a.flip(1)[:, :, None])[..., 0]

    @staticmethod
    def _leaky(y: torch.Tensor, leak: float) -> torch.Tensor:
        """lfilter([1], [1, -leak], y, axis=1) as leak^n * cumsum(y[m] leak^-m): a prefix sum in place of the
        sequential recursion (a frame's prefix sums are dominated by their latest terms, so the scaling loses
        nothing: leak >= 0.9 and 512 samples keep leak^-n below 1e24)."""
        p = leak ** torch.arange(y.shape[1], dtype=y.dtype, device=y.device)
        return p * torch.cumsum(y / p, dim=1)

    def lpc_rows(self, frames: np.ndarray, order: int, method: str = "autocorrelation") -> np.ndarray:
        if method != "autocorrelation":
            return glottal.lpc_rows(frames, order, method)
        return self._lpc(self._t(frames), order).cpu().numpy()

    def iaif_filters(self, x_hp: np.ndarray, centres: np.ndarray, fs: int, leak: float,
                     lpc_method: str = "autocorrelation") -> np.ndarray:
        """glottal.iaif_filters, batched over the frames."""
        if lpc_method != "autocorrelation":
            return glottal.iaif_filters(x_hp, centres, fs, leak, lpc_method)
        p_vt, p_gl = 2 * round(fs / 2000) + 4, 2 * round(fs / 4000)
        length = round(glottal.IAIF_FRAME_S * fs)
        ext = self._windows(self._t(x_hp), self._t(centres - length // 2 - p_vt), length + p_vt)

        def integrate(y: torch.Tensor) -> torch.Tensor:
            y = self._leaky(y, leak)
            return y - y.mean(1, keepdim=True)

        frame = ext[:, p_vt:]
        tilt = self._fir(self._lpc(frame, 1), ext[:, p_vt - 1 :])
        g1 = integrate(self._fir(self._lpc(tilt, p_vt), ext))
        a_gl = self._lpc(g1, p_gl)
        y = integrate(self._fir(a_gl, ext[:, p_vt - p_gl :]))
        return self._lpc(y, p_vt).cpu().numpy()

    def gfm_filters(self, x_hp: np.ndarray, centres: np.ndarray, fs: int, leak: float, n_gl: int = 3) -> np.ndarray:
        """glottal.gfm_filters, batched over the frames (the whole block's leaky integration stays scipy's)."""
        p_vt = 2 * round(fs / 2000) + 4
        length = round(glottal.IAIF_FRAME_S * fs)
        gv = self._t(lfilter([1.0], [1.0, -leak], x_hp))
        ext = self._windows(gv, self._t(centres - length // 2 - n_gl), length + n_gl)

        def fir(a: torch.Tensor) -> torch.Tensor:
            return sum(a[:, k, None] * ext[:, n_gl - k : n_gl - k + length] for k in range(a.shape[1]))

        ag = self._lpc(ext[:, n_gl:], 1)
        for _ in range(n_gl - 1):
            a1 = self._lpc(fir(ag), 1)[:, 1:]
            ag = torch.nn.functional.pad(ag, (0, 1)) + a1 * torch.nn.functional.pad(ag, (1, 0))
        return self._lpc(fir(ag), p_vt).cpu().numpy()

    def inverse_filter(self, x: np.ndarray, a_rows: np.ndarray, hop: int) -> np.ndarray:
        """glottal.inverse_filter: row filters cross-faded between row centres."""
        n_rows, taps = a_rows.shape
        if x.size != n_rows * hop:
            raise ValueError(f"inverse_filter needs {n_rows} rows * {hop} samples, got {x.size} samples")
        a = self._t(a_rows)
        a_ext = torch.cat([a[:1], a, a[-1:]])
        first = hop // 2 - hop
        pad = taps + hop
        xp = torch.nn.functional.pad(self._t(x), (pad, pad))
        lo = first - taps + 1 + pad
        lagged = xp.unfold(0, taps, 1)[lo : lo + (n_rows + 1) * hop].reshape(n_rows + 1, hop, taps)
        both = lagged @ torch.stack([a_ext[:-1].flip(1), a_ext[1:].flip(1)], dim=2)
        w = torch.arange(hop, dtype=both.dtype, device=self.device) / hop
        out = ((1 - w) * both[..., 0] + w * both[..., 1]).reshape(-1)[-first : -first + x.size]
        return out.cpu().numpy()

    # -- spectra and wavelet bands -----------------------------------------------------------------------------
    def rfft_mag(self, rows: np.ndarray, nfft: int, n_bins: int) -> np.ndarray:
        """glottal._rfft_mag: |rfft(rows, nfft)| up to bin n_bins."""
        x = self._t(rows)
        chunk = max(1, CHUNK_ELEMENTS // nfft)
        out = [torch.fft.rfft(x[i : i + chunk], nfft, dim=1)[:, :n_bins].abs() for i in range(0, len(x), chunk)]
        return (torch.cat(out) if out else x.new_zeros((0, n_bins))).cpu().numpy()

    def _bands(self, x: torch.Tensor, scales: list[int]) -> torch.Tensor:
        """glottal.wavelet_bands, by one FFT of the whole block (the reference's overlap-save segments give the
        same convolution)."""
        half = 5 * max(scales)
        nfft = scipy.fft.next_fast_len(x.numel() + half, real=True)  # no wrap-around into the block
        spec = torch.fft.rfft(x, nfft)
        out = torch.empty((len(scales), x.numel()), dtype=x.dtype, device=self.device)
        for i, s in enumerate(scales):
            t = torch.arange(5 * s + 1, dtype=x.dtype, device=self.device) / s
            taps = -torch.cos(np.pi * t) * torch.exp(-(t**2) / 2)
            kern = torch.zeros(nfft, dtype=x.dtype, device=self.device)
            kern[: 5 * s + 1] = taps
            kern[nfft - 5 * s :] = taps[1:].flip(0)
            out[i] = torch.fft.irfft(spec * torch.fft.rfft(kern).real, nfft)[: x.numel()]
        return out

    def peak_slope(self, x: np.ndarray, n_rows: int, hop: int) -> np.ndarray:
        """glottal.peak_slope."""
        bands = self._bands(self._t(x), [64, 32, 16, 8, 4, 2, 1]).abs()
        sub, n_sub, n = hop // 2, 2 * n_rows + 8, x.size
        padded = bands.new_zeros((bands.shape[0], n_sub * sub))
        padded[:, 3 * sub : 3 * sub + n] = bands[:, : n_sub * sub - 3 * sub]
        chunk = padded.reshape(bands.shape[0], n_sub, sub).amax(2)
        win = chunk.unfold(1, 8, 1)[:, 0 : 2 * n_rows : 2].amax(2)
        t = torch.arange(1, bands.shape[0] + 1, dtype=bands.dtype, device=self.device) - (bands.shape[0] + 1) / 2
        y = torch.log10(win)
        slope = (t[:, None] * (y - y.mean(0))).sum(0) / (t**2).sum()
        return torch.where(torch.isfinite(slope), slope, torch.nan).cpu().numpy()

    def mdq_dispersion(self, residual: np.ndarray, gcis: np.ndarray, search: np.ndarray) -> np.ndarray:
        """glottal._mdq_dispersion."""
        bands = self._bands(self._t(residual), list(glottal.MDQ_SCALES))
        reach = int(search.max())
        offsets = torch.arange(-reach, reach + 1, device=self.device)
        ok = offsets.abs()[None] <= self._t(search)[:, None]
        starts = self._t(gcis - reach)
        dist = torch.zeros(gcis.size, dtype=bands.dtype, device=self.device)
        for band in bands:
            vals = torch.where(ok, self._windows(band, starts, offsets.numel()), -torch.inf)
            dist += offsets[vals.argmax(1)].abs()
        return (dist / len(bands)).cpu().numpy()

    # -- NCCF and MFCC ---------------------------------------------------------------------------------------
    def nccf(self, x_hp: np.ndarray, rows: np.ndarray, lag: np.ndarray, length: np.ndarray,
             offsets: tuple) -> np.ndarray:
        """acoustic.nccf: (rows, offsets) normalised cross-correlations, each row's sums over the same `width`
        samples as the reference's."""
        x = self._t(x_hp)
        rows_t, lag_t, length_t = self._t(rows), self._t(lag), self._t(length)
        width = int(length.max(initial=1))
        d0, d1 = min(offsets), max(offsets)
        span = width + d1 - d0
        pick = self._t(np.asarray(offsets) - d0)
        chunk = max(1, CHUNK_ELEMENTS // (len(offsets) * width))
        out = []
        for c in range(0, rows.size, chunk):
            part = slice(c, c + chunk)
            start = rows_t[part] * self.hop + self.hop // 2 - (length_t[part] + lag_t[part]) // 2
            inside = (torch.arange(width, device=self.device)[None] < length_t[part, None]).to(x.dtype)
            a = self._windows(x, start, width) * inside
            energy_a = (a * a).sum(1)
            later = self._windows(x, start + lag_t[part] + d0, span).unfold(1, width, 1)[:, pick]  # (R, D, width)
            energy_b = (later * later * inside[:, None]).sum(2)
            out.append((a[:, None] * later).sum(2) / torch.sqrt(energy_a[:, None] * energy_b))
        r = torch.cat(out) if out else x.new_zeros((0, len(offsets)))
        return torch.nan_to_num(r, nan=0.0, posinf=np.finfo(np.float64).max, neginf=-np.finfo(np.float64).max
                                ).cpu().numpy()

    @functools.cache  # noqa: B019
    def _mfcc_basis(self, sr: int, n_fft: int, win_length: int, n_mels: int, fmin: float, n_mfcc: int):
        window = librosa.util.pad_center(librosa.filters.get_window("hann", win_length, fftbins=True), size=n_fft)
        mel = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=sr / 2)  # float32, as librosa's
        dct = scipy.fft.dct(np.eye(n_mels), type=2, norm="ortho", axis=0)[:n_mfcc]
        return self._t(window), self._t(mel.astype(np.float64)), self._t(dct)

    def mfcc(self, y: np.ndarray, sr: int, hop: int, n_mels: int, fmin: float, n_mfcc: int) -> np.ndarray:
        """(frames, n_mfcc): librosa's melspectrogram (n_fft 512, 25 ms Hann, centred, zero padding, power 2) ->
        power_to_db (amin 1e-10, ref 1, no top_db) -> DCT-II ortho, as acoustic.mfcc_rows calls them."""
        n_fft, win_length = 512, round(0.025 * sr)
        window, mel, dct = self._mfcc_basis(sr, n_fft, win_length, n_mels, fmin, n_mfcc)
        x = torch.nn.functional.pad(self._t(y), (n_fft // 2, n_fft // 2))
        frames = x.unfold(0, n_fft, hop)  # 1 + len(y) // hop frames, as librosa's centred STFT
        chunk = max(1, CHUNK_ELEMENTS // n_fft)
        out = []
        for i in range(0, len(frames), chunk):
            power = torch.fft.rfft(frames[i : i + chunk] * window, dim=1).abs() ** 2
            db = 10 * torch.log10(torch.clamp(power @ mel.T, min=1e-10))
            out.append(db @ dct.T)
        return (torch.cat(out) if out else x.new_zeros((0, n_mfcc))).cpu().numpy()

    # -- the 74-column layout: 3-period spectra and MCEP (extractors/mcep.py) ------------------------------------
    def frame_spectra(self, x: np.ndarray, centres: np.ndarray, f0: np.ndarray, fs: int,
                      dftlen: int = mcep.DFTLEN) -> np.ndarray:  # fmt: skip
        """mcep.frame_spectra: 3-period Blackman windows (unit sum, phase 0 at the centre), rfft."""
        lengths = mcep.window_lengths(np.asarray(f0), fs)
        half = int(lengths.max()) // 2
        if 2 * half + 1 > dftlen:
            raise ValueError(f"a 3-period window of {2 * half + 1} samples exceeds the {dftlen}-point DFT")
        xt = self._t(np.asarray(x, np.float64))
        offsets = torch.arange(-half, half + 1, device=self.device)
        seg = self._windows(xt, self._t(np.asarray(centres, np.int64)) - half, 2 * half + 1)
        m = (self._t(lengths.astype(np.float64))[:, None] - 1) / 2.0
        arg = torch.pi * offsets[None, :].double() / m
        win = torch.where(offsets.abs()[None, :] <= m, 0.42 + 0.5 * torch.cos(arg) + 0.08 * torch.cos(2 * arg),
                          torch.zeros((), dtype=torch.float64, device=self.device))  # fmt: skip
        win = win / win.sum(dim=1, keepdim=True)
        frames = torch.zeros((len(centres), dftlen), dtype=torch.float64, device=self.device)
        frames[:, offsets % dftlen] = seg * win
        return torch.fft.rfft(frames, dim=1).cpu().numpy()

    def _true_envelope(self, log_amp: torch.Tensor, orders: torch.Tensor, presmooth: bool = True) -> torch.Tensor:
        """mcep.true_envelope on the device (same passes, same stopping rule per row; each pass's transforms as
        products with `mcep._te_basis`' cosines and the energy above the order by Parseval, as mcep._iterate; the
        spread about c0 summed directly, which float32 would otherwise lose to c0's square)."""
        n_bins = log_amp.shape[1]
        dftlen = 2 * (n_bins - 1)
        orders = torch.clamp(torch.round(mcep.TE_SMOOTHING * orders), max=dftlen // 2 - 1).long()
        a = log_amp.clone()
        if presmooth:
            pre = self._true_envelope(log_amp, torch.round(orders / 2.0), presmooth=False)
            slim = torch.round(0.25 * dftlen / orders).long()
            k = torch.arange(n_bins, device=self.device)[None, :]
            edge = (k < slim[:, None]) | (k > n_bins - slim[:, None])
            a = torch.where(edge, pre, a)
        n_coef = int(orders.max()) + 1
        fwd, back = (self._t(m).to(a.dtype) for m in mcep._te_basis(n_bins, n_coef))
        energy = self._t(np.where((np.arange(n_bins) == 0) | (np.arange(n_bins) == n_bins - 1), 1.0, 2.0) / dftlen)
        energy = energy.to(a.dtype)
        kk = torch.arange(n_coef, device=self.device)[None, :]
        o = orders[:, None].to(a.dtype)
        lifter = torch.where(kk <= o, 0.54 + 0.46 * torch.cos(torch.pi * kk / torch.clamp(o, min=1)),
                             torch.zeros((), dtype=a.dtype, device=self.device))  # fmt: skip
        inside = kk <= orders[:, None]
        floor = a - float(np.log(10 ** (mcep.TE_PREC_DB / 20)))
        out = torch.empty_like(a)
        todo = torch.arange(a.shape[0], device=self.device)
        cc = torch.zeros((a.shape[0], n_coef), dtype=a.dtype, device=self.device)
        for _ in range(mcep.TE_MAXIT):
            prod = a @ fwd  # [c0, 2 c1, …, 2 c_{n_coef-1}, c_{dftlen/2}]
            ccp = prod[:, :-1]
            c0 = ccp[:, 0]
            e_in_sq = torch.sum(torch.where(inside, ccp, 0.0) ** 2, dim=1)
            spread = ((a - c0[:, None]) ** 2) @ energy  # the log spectrum's energy less c0's (the weights sum to 1)
            e_out_sq = 2 * (spread - prod[:, -1] ** 2) - (e_in_sq - c0**2)
            e_in = torch.sqrt(e_in_sq)
            lam = (e_in + torch.sqrt(torch.clamp(e_out_sq, min=0.0))) / torch.clamp(e_in, min=1e-30)
            cc = lam[:, None] * lifter * (ccp - cc) + cc
            lv = cc @ back
            a = torch.maximum(a, lv)
            out[todo] = lv
            done = torch.all(lv >= floor, dim=1)
            if bool(done.any()):
                keep = ~done
                todo, a, floor, cc, lifter, inside = todo[keep], a[keep], floor[keep], cc[keep], lifter[keep], inside[keep]
                if todo.numel() == 0:
                    break
        return out

    def mcep_rows(self, spec: np.ndarray, f0: np.ndarray, fs: int, order: int = mcep.ORDER) -> np.ndarray:
        """mcep.mcep_rows: true envelope on the pooled grid in float32, then the mel cepstrum (numpy: small)."""
        log_amp = torch.log(torch.clamp(self._t(np.abs(spec)), min=mcep.LOG_FLOOR))
        if mcep.TE_POOL > 1:
            n = (log_amp.shape[1] - 1) // mcep.TE_POOL
            rest = log_amp[:, 1:].reshape(log_amp.shape[0], n, mcep.TE_POOL).amax(dim=2)
            log_amp = torch.cat([log_amp[:, :1], rest], dim=1)
        dtype = torch.float32 if np.dtype(mcep.TE_DTYPE) == np.float32 else torch.float64
        orders = self._t(np.round(0.5 * fs / np.asarray(f0, np.float64))).to(dtype)
        env = self._true_envelope(log_amp.to(dtype), orders)
        return mcep.mel_cepstrum(env.double().cpu().numpy(), fs, order)

    # -- the 74-column layout: HMPD's time smoothing and Rd_conf (extractors/hmpd.py, extractors/rd_conf.py) --------
    def _filtfilt_rows(self, b: np.ndarray, x: torch.Tensor) -> torch.Tensor:
        """hmpd's zero-phase filters: odd reflection of 3 (len(b) - 1) rows at each end (hmpd._extend_ends), then b's
        autocorrelation along the rows (the reference sums a constant b as sums of rows twice, hmpd._box_twice, and
        folds a symmetric one, hmpd._symmetric: the same sums in another order)."""
        n, half = x.shape[0], len(b) - 1
        pad = min(3 * half, n - 1)
        if pad > 0:
            head = 2 * x[:1] - torch.flip(x[1 : pad + 1], [0])
            tail = 2 * x[-1:] - torch.flip(x[n - pad - 1 : n - 1], [0])
            x = torch.cat([head, x, tail])
        if pad < half:
            x = torch.cat([x[:1].expand(half - pad, -1), x, x[-1:].expand(half - pad, -1)])
            pad = half
        k = torch.as_tensor(np.convolve(b, b[::-1]), dtype=x.dtype, device=self.device)
        out = torch.nn.functional.conv1d(x.T[:, None, :], k[None, None, :])[:, 0, :].T  # (m - 2 half, bins)
        start = pad - half
        return out[start : start + n]

    def pdm_pdd(self, z: np.ndarray, with_pdm: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
        """hmpd.pdm_pdd: per-bin PDM and PDD of PD phasors (rows, bins), PDM in float32 and PDD in float64 as the
        reference."""
        zt = self._t(z)
        pdm = None
        if with_pdm:
            zc, zs = zt.real.float(), zt.imag.float()
            rect_m = np.full(hmpd.PDM_ROWS, 1.0 / hmpd.PDM_ROWS, np.float32)
            mc, ms = self._filtfilt_rows(rect_m, zc), self._filtfilt_rows(rect_m, zs)
            mag = torch.hypot(mc, ms)
            big = mag > 1e-6
            scale = torch.where(big, 1.0 / torch.clamp(mag, min=1e-30), torch.zeros_like(mag))
            pdm = torch.complex(mc * scale, ms * scale).cpu().numpy()
        hann = np.hanning(hmpd.PDD_ROWS)
        hann /= hann.sum()

        def median_rows(x: torch.Tensor) -> torch.Tensor:  # hmpd._median9: zeros beyond the ends
            h = hmpd.PDD_ROWS // 2
            zeros = x.new_zeros((h, x.shape[1]))
            return torch.cat([zeros, x, zeros]).unfold(0, hmpd.PDD_ROWS, 1).median(dim=-1).values

        zc, zs = zt.real.double(), zt.imag.double()  # PDD in float64, as the reference (hmpd.pdm_pdd says why)
        mc_, ms_ = median_rows(zc), median_rows(zs)
        tc, ts = self._filtfilt_rows(hann, mc_), self._filtfilt_rows(hann, ms_)
        for r in (0, -1):  # hmpd.pdm_pdd: no trend where the end rows' medians are 0 (its phasor then 1)
            undefined = (mc_[r] == 0) & (ms_[r] == 0)
            tc[r, undefined], ts[r, undefined] = 0.0, 0.0
        norm = torch.hypot(tc, ts)
        flat = norm == 0
        norm = torch.where(flat, torch.ones_like(norm), norm)
        cos_t, sin_t = torch.where(flat, torch.ones_like(tc), tc / norm), ts / norm
        dc, ds = zc * cos_t + zs * sin_t, zs * cos_t - zc * sin_t
        rect_d = np.full(hmpd.PDD_ROWS, 1.0 / hmpd.PDD_ROWS)
        r = torch.hypot(self._filtfilt_rows(rect_d, dc), self._filtfilt_rows(rect_d, ds))
        pdd = torch.where(r < 1 - hmpd.PDD_ROUNDING, torch.sqrt(-2 * torch.log(torch.clamp(r, 1e-300, 1.0))),
                          torch.zeros_like(r))  # fmt: skip
        pdd = torch.where((zc != 0) | (zs != 0), pdd, torch.full_like(pdd, hmpd.PDD_NO_PHASE))
        return pdm, pdd.cpu().numpy()

    def _min_phase_half(self, log_amp: torch.Tensor, n_out: int) -> torch.Tensor:
        """rd_conf._min_phase: minimum phase at bins 0 … n_out-1 of half log amplitudes on a 2H grid."""
        n = 2 * (log_amp.shape[-1] - 1)
        cep = torch.fft.irfft(log_amp, n=n, dim=-1)
        fold = torch.zeros_like(cep[..., : n // 2 + 1])
        fold[..., 0] = cep[..., 0]
        fold[..., 1 : n // 2] = 2 * cep[..., 1 : n // 2]
        fold[..., n // 2] = cep[..., n // 2]
        return torch.fft.rfft(fold, n=n, dim=-1).imag[..., :n_out]

    def rd_conf_rows(self, hm) -> np.ndarray:  # noqa: ANN001 (harmonics.Harmonics)
        """rd_conf.rd_conf_rows: per harmonic count, the rows' minimum phase by the folded cepstrum and the mean
        squared phase distortion against every Rd of the model (the model's terms from the reference's cache)."""
        out = np.full(hm.count.size, np.nan)
        for h in np.unique(hm.count):
            if h < rd_conf.N_PD + 2:
                continue
            idx = np.flatnonzero(hm.count == h)
            amp = self._t(hm.amp[idx, : h + 1])
            ph = self._t(hm.phase[idx, : h + 1])
            log_amp = torch.log(torch.clamp(amp, min=1e-300))
            log_amp = torch.cat([log_amp[:, 1:2], log_amp[:, 1:-1], log_amp[:, -2:-1]], dim=1)  # rd_conf._edges
            mp = self._min_phase_half(log_amp, rd_conf.N_PD + 1)
            a = ph[:, : rd_conf.N_PD + 1].clone()
            a[:, 0] = 0.0
            p = (a - mp)[:, None, :] - self._t(rd_conf._model_terms(int(h)))[None]
            d = torch.diff(p, dim=2) - p[:, :, 1:2]
            pd = torch.remainder(d + torch.pi, 2 * torch.pi)[:, :, 1:] - torch.pi  # harmonics.wrap
            err = torch.mean(pd**2, dim=2).amin(dim=1)
            out[idx] = (1 - torch.sqrt(err) / torch.pi).cpu().numpy()
        return out

    # -- the 74-column layout: SRH, harmonic picking, HMPD's phase distortion, COVAREP's Rd ------------------------
    @functools.cache  # noqa: B019
    def _hann_sym(self, length: int) -> torch.Tensor:
        return self._t(glottal.hann_sym(np.array([length]), length)[0])

    def _lp_residual(self, x: torch.Tensor, fs: int, order: int) -> torch.Tensor:
        """glottal.lp_residual: 25 ms Hann frames every 5 ms, each frame's LP residual scaled to the frame's energy,
        overlap-added (index_add in place of bincount: the same sums in another order), peak normalised to 1."""
        length, shift = round(0.025 * fs) + 1, round(0.005 * fs)
        starts = torch.arange(0, max(0, x.numel() - length), shift, device=self.device)
        res = torch.zeros_like(x)
        if starts.numel() == 0:
            return res
        frames = self._windows(x, starts, length) * self._hann_sym(length)
        a = self._lpc(frames, order, window=False)
        inv = self._fir(a, torch.nn.functional.pad(frames, (order, 0)))
        gain = torch.sqrt((frames * frames).sum(1) / (inv * inv).sum(1))
        inv = inv * torch.nan_to_num(gain, nan=0.0, posinf=0.0)[:, None]
        idx = starts[:, None] + torch.arange(length, device=self.device)[None]
        res = res.index_add(0, idx.reshape(-1), inv.reshape(-1))
        peak = res.abs().max()
        return res / peak if bool(peak > 0) else res

    def srh_values(self, x: np.ndarray, centres: np.ndarray, fs: int, lo: int, hi: int) -> np.ndarray:
        """srh.srh_values: the LP residual's 100 ms Blackman frames, their fs-point DFT (float32, as the reference's)
        read at the harmonics and between them (gathers of `srh.candidates`' bins, summed in the reference's order),
        SRH over lo … hi; batched over frames."""
        centres = np.asarray(centres, dtype=np.int64)
        f, plus, minus = srh.candidates(lo, hi)
        if centres.size == 0:
            return np.zeros((0, f.size))
        res = self._lp_residual(self._t(np.asarray(x, np.float64)), fs, srh.matlab_round(0.75 * fs / 1000))
        length = srh.frame_length(fs)
        n = np.arange(length)
        win = self._t(0.42 - 0.5 * np.cos(2 * np.pi * n / (length - 1)) + 0.08 * np.cos(4 * np.pi * n / (length - 1)))
        alt_sign = self._t(np.where(n % 2 == 0, 1.0, -1.0))
        n_bins = int(plus.max()) + 1
        plus_t, minus_t, starts = self._t(plus), self._t(minus), self._t(centres - length // 2 - 1)
        # on a CPU, srh.CHUNK frames at a time (their spectra stay in cache: whole-block batches ran 3x slower)
        chunk = srh.CHUNK if self.device.type == "cpu" else max(1, CHUNK_ELEMENTS // (2 * fs))
        values = []
        for i in range(0, centres.size, chunk):
            frames = self._windows(res, starts[i : i + chunk], length) * win
            frames = frames - frames.mean(1, keepdim=True)
            alt = frames @ alt_sign
            norm = torch.sqrt(torch.clamp(0.5 * (fs * (frames * frames).sum(1) - alt**2), min=1e-300))
            spec = torch.fft.rfft(frames.float(), fs, dim=1)[:, :n_bins].abs().double()
            p, m = spec[:, plus_t], spec[:, minus_t]
            # pitch_srh's order: the harmonics one after another, then the difference, then the norm (as srh_values)
            plus_sum, minus_sum = p[:, 0].clone(), m[:, 0].clone()
            for k in range(1, srh.N_HARMONICS):
                plus_sum += p[:, k]
            for k in range(1, srh.N_HARMONICS - 1):
                minus_sum += m[:, k]
            values.append((plus_sum - minus_sum) / norm[:, None])
        return torch.cat(values).cpu().numpy()

    def srh_f0(self, x: np.ndarray, centres: np.ndarray, fs: int, f0_median: float | None) -> np.ndarray:
        """srh.srh_f0 on `srh_values`."""
        lo, hi = srh.search_range(f0_median)
        return srh.best(self.srh_values(x, centres, fs, lo, hi), np.arange(lo, hi + 1))[0]

    def srh_track(self, x: np.ndarray, centres: np.ndarray, fs: int) -> tuple[np.ndarray, float | None]:
        """srh.srh_track on `srh_values`."""
        return srh.srh_track(x, centres, fs, values=self.srh_values)

    def pick(self, spec: np.ndarray, f0: np.ndarray, fs: int) -> harmonics.Harmonics:
        """harmonics.pick, batched over rows: local maxima of the log amplitude with parabolic refinement, the one
        nearest each harmonic within half a spacing (the nearest peak on either side by running max/min of peak
        indices), phases read linearly between bins, frequencies on the median spacing."""
        s = self._t(spec)
        f0 = np.asarray(f0, np.float64)
        rows, n_bins = s.shape
        dftlen = 2 * (n_bins - 1)
        dev, f64 = self.device, torch.float64
        mag = torch.clamp(s.abs(), min=1e-300)
        logm = torch.log(mag)
        count_np = np.round((fs / 2 - f0 / 2) / f0).astype(int)
        h_max = int(count_np.max())
        count = self._t(count_np)
        k = torch.arange(1, h_max + 1, device=dev, dtype=f64)[None, :]
        step = dftlen * self._t(f0)[:, None] / fs
        nominal = step * k
        peak = torch.zeros_like(logm, dtype=torch.bool)
        peak[:, 1:-1] = (mag[:, 1:-1] > mag[:, :-2]) & (mag[:, 1:-1] >= mag[:, 2:])  # harmonics.pick: the amplitude's
        left, right = torch.roll(logm, 1, 1), torch.roll(logm, -1, 1)
        b = 0.5 * (right - left)
        a = logm - b - left
        convex = a > 0
        safe = torch.where(convex, a, torch.ones_like(a))
        bins = torch.arange(n_bins, device=dev)
        zero = torch.zeros((), dtype=f64, device=dev)
        pos = bins[None, :] + torch.where(convex, 0.5 * b / safe, zero)
        val = logm + torch.where(convex, 0.25 * b**2 / safe, zero)
        prev = torch.cummax(torch.where(peak, bins[None, :], -1), 1).values
        nxt = torch.cummin(torch.where(peak, bins[None, :], n_bins).flip(1), 1).values.flip(1)
        valid_h = k <= count[:, None]
        base = torch.clamp(torch.floor(nominal).long(), 0, n_bins - 1)
        cand_l = prev.gather(1, base)
        cand_r = nxt.gather(1, torch.clamp(base + 1, max=n_bins - 1))
        inf = torch.full((), torch.inf, dtype=f64, device=dev)
        pos_l = torch.where(cand_l >= 0, pos.gather(1, cand_l.clamp(min=0)), inf)
        pos_r = torch.where(cand_r < n_bins, pos.gather(1, cand_r.clamp(max=n_bins - 1)), inf)
        d_l, d_r = (pos_l - nominal).abs(), (pos_r - nominal).abs()
        use_r = d_r < d_l
        best = torch.where(use_r, cand_r, cand_l).clamp(0, n_bins - 1)
        found = (torch.minimum(d_l, d_r) < step / 2) & valid_h
        nearest_bin = torch.clamp(torch.round(nominal).long(), 0, n_bins - 1)
        hpos = torch.where(found, torch.where(use_r, pos_r, pos_l), nominal)
        hamp = torch.where(found, torch.exp(val.gather(1, best)), mag.gather(1, nearest_bin))
        hpos_c = hpos.clamp(0, n_bins - 1)
        i0 = torch.clamp(torch.floor(hpos_c).long(), max=n_bins - 2)
        frac = hpos_c - i0
        p0 = torch.angle(s.gather(1, i0))
        hph = _wrap(p0 + frac * _wrap(torch.angle(s.gather(1, i0 + 1)) - p0))
        nan = torch.full((), torch.nan, dtype=f64, device=dev)
        with_dc = torch.cat([torch.zeros((rows, 1), dtype=f64, device=dev), torch.where(valid_h, hpos * fs / dftlen, nan)], 1)
        spacing = _nanmedian_rows(torch.diff(with_dc, dim=1))
        kk = torch.arange(h_max + 1, device=dev)[None, :]
        inside = kk <= count[:, None]
        freq = torch.where(inside, spacing[:, None] * kk, nan)
        amp = torch.where(inside, torch.cat([mag[:, :1], hamp], 1), nan)
        phase = torch.where(inside, torch.cat([torch.angle(s[:, :1]), hph], 1), nan)
        np_ = lambda t: t.cpu().numpy()  # noqa: E731
        return harmonics.Harmonics(np_(freq), np_(amp), np_(phase), count_np, np_(spacing))

    def pd_phasors(self, h: harmonics.Harmonics, f0: np.ndarray, fs: int) -> np.ndarray:
        """hmpd.pd_phasors: the phase distortion per harmonic (minimum phase of the linear-in-log envelope through
        the harmonics removed; np.interp's own knot search and formula), then its phasors on the DFT bins (float64
        phasors, as the reference's), batched over rows."""
        dev, f64, n_fft = self.device, torch.float64, hmpd.DFTLEN
        freq, amp, phase = self._t(h.freq), self._t(h.amp), self._t(h.phase)
        rows, n_h = amp.shape
        count = self._t(np.asarray(h.count))
        c = count.clamp(min=1)[:, None]
        bins = self._t(np.arange(n_fft // 2 + 1) * fs / n_fft)[None, :]
        # np.interp(bins, [0, f_1 … f_c], [a_1, a_1 … a_c]): freq[:, 0] is the 0 knot
        fp = torch.log(amp)
        fp = torch.cat([fp[:, 1:2], fp[:, 1:]], 1)
        xp = freq
        spacing = freq[:, 1:2]
        j = torch.clamp(torch.floor(bins / spacing).long(), min=0)
        j = torch.minimum(j, c - 1)
        j = torch.where(xp.gather(1, j) > bins, (j - 1).clamp(min=0), j)  # the knot search's own answer at a knot
        j = torch.where((j + 1 < c) & (xp.gather(1, torch.minimum(j + 1, c)) <= bins), j + 1, j)
        x0, y0 = xp.gather(1, j), fp.gather(1, j)
        slope = (fp.gather(1, j + 1) - y0) / (xp.gather(1, j + 1) - x0)
        log_env = torch.where(bins == x0, y0, slope * (bins - x0) + y0)
        log_env = torch.where(bins >= xp.gather(1, c), fp.gather(1, c), log_env)
        cep = torch.fft.irfft(log_env, dim=1)
        fold = torch.zeros_like(cep[:, : n_fft // 2 + 1])
        fold[:, 0] = cep[:, 0]
        fold[:, 1 : n_fft // 2] = 2 * cep[:, 1 : n_fft // 2]
        fold[:, n_fft // 2] = cep[:, n_fft // 2]
        minphase = torch.fft.rfft(fold, n=n_fft, dim=1).imag
        pos = torch.clamp(torch.nan_to_num(freq, nan=float(fs)) * n_fft / fs, 0, n_fft / 2)
        i0 = torch.clamp(torch.floor(pos).long(), max=n_fft // 2 - 1)
        frac = pos - i0
        vtf = minphase.gather(1, i0) * (1 - frac) + minphase.gather(1, i0 + 1) * frac
        phi = _wrap(phase - vtf)
        phi[:, 0] = 0.0
        k = torch.arange(n_h, device=dev)[None, :]
        rps = torch.where(k <= count[:, None], phi - k * phi[:, 1:2], torch.zeros((), dtype=f64, device=dev))
        pd = torch.diff(_unwrap_rows(rps), dim=1)
        defined = k[:, 1:] <= count[:, None]
        # hmpd._phasors_on_bins
        n = n_h - 1
        cnt = defined.sum(1)
        ys = _unwrap_rows(torch.where(defined, _wrap(pd), torch.zeros((), dtype=f64, device=dev)))
        ys = torch.cat([torch.zeros((rows, 1), dtype=f64, device=dev), ys], 1)
        u = bins / self._t(np.asarray(f0, np.float64))[:, None]
        kb = torch.clamp(torch.floor(u).long(), 0, n - 1)
        fr = torch.clamp(u - kb, 0.0, 1.0)
        low, high = ys.gather(1, kb), ys.gather(1, torch.clamp(kb + 1, max=n))
        v = torch.where(u < 1.0, ys[:, 1:2] * torch.clamp((u - 0.95) / 0.05, 0.0, 1.0), low + fr * (high - low))
        inside = (u <= cnt[:, None]) & (cnt[:, None] >= 1)
        zero = torch.zeros((), dtype=f64, device=dev)
        z = torch.complex(torch.where(inside, torch.cos(v), zero), torch.where(inside, torch.sin(v), zero))
        # the expected phasor of COVAREP's random PD past the last harmonic (hmpd._phasors_on_bins)
        w = u - cnt[:, None]
        gap = (w > 0) & (w < 1) & (cnt[:, None] >= 1)
        last = ys.gather(1, cnt[:, None])
        sw = torch.sinc(w)
        z = torch.where(gap, torch.complex(torch.cos(last) * sw, torch.sin(last) * sw), z)
        return z.cpu().numpy()

    def _harmonic_spectrum(self, x: torch.Tensor, centres: np.ndarray, f0: np.ndarray, half: np.ndarray, fs: int,
                           n_harm: int, nfft: int) -> torch.Tensor:  # fmt: skip
        """glottal.harmonic_spectrum on an nfft-point DFT: 3-period Blackman windows (half-lengths `half`) centred
        on `centres`, phase relative to the centre, read at harmonics 1 … n_harm linearly between bins."""
        hb = int(half.max())
        n = torch.arange(-hb, hb + 1, device=self.device)
        frames = self._windows(x, self._t(centres - hb), 2 * hb + 1)
        ht = self._t(half)[:, None]
        nd = n[None, :].double()
        win = torch.where(n.abs()[None, :] <= ht, 0.42 + 0.5 * torch.cos(torch.pi * nd / ht)
                          + 0.08 * torch.cos(2 * torch.pi * nd / ht), torch.zeros((), dtype=torch.float64, device=self.device))  # fmt: skip
        win = win / win.sum(1, keepdim=True)
        buf = torch.zeros((len(centres), nfft), dtype=torch.float64, device=self.device)
        buf[:, n % nfft] = frames * win
        spec = torch.fft.rfft(buf, dim=1)
        pos = torch.arange(1, n_harm + 1, device=self.device)[None, :] * self._t(f0)[:, None] * nfft / fs
        lo = torch.clamp(torch.floor(pos).long(), max=spec.shape[1] - 2)
        frac = pos - lo
        return (1 - frac) * spec.gather(1, lo) + frac * spec.gather(1, lo + 1)

    @staticmethod
    def _min_phase_harm(mag: torch.Tensor, n_out: int) -> torch.Tensor:
        """glottal._min_phase: the folded real cepstrum of the mirrored magnitudes at harmonics 0 … h."""
        h = mag.shape[-1] - 1
        rcc = torch.fft.irfft(torch.log(mag), 2 * h, dim=-1)
        fold = torch.cat([rcc[..., :1], 2 * rcc[..., 1:h], rcc[..., h : h + 1]], dim=-1)
        return torch.fft.fft(fold, 2 * h, dim=-1).imag[..., :n_out]

    def rd_covarep(self, x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, fs: int,
                   hop: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """glottal.rd_covarep: the frames on voiced rows' boundaries (`glottal.rd_frames`, shared), their harmonic
        spectra batched per DFT length (each harmonic count's zero padding as the reference's per-count call
        chooses it), the phase remainder per harmonic count, and one Brent search over every frame
        (`glottal.brent_min_rows`, given torch as its array namespace)."""
        n_rows = voiced.size
        if not voiced.any():
            return np.full(n_rows, np.nan), np.full(n_rows, np.nan)
        bounds, sel, hs, fsel, half, nfft = glottal.rd_frames(f0, voiced, fs)
        k = glottal.MSP_HARMONICS + 1
        rd_b, err_b = np.full(n_rows + 1, np.nan), np.full(n_rows + 1, np.nan)
        if sel.size:
            counts = np.unique(hs)
            xt = self._t(np.asarray(x, np.float64))
            frame = torch.empty((sel.size, k - 1), dtype=torch.float64, device=self.device)
            for size in np.unique(nfft):
                part = np.flatnonzero(nfft == size)
                m = self._harmonic_spectrum(xt, bounds[sel[part]] * hop, fsel[part], half[part], fs,
                                            int(hs[part].max()), int(size))  # fmt: skip
                for h in np.unique(hs[part]):
                    mine = np.flatnonzero(hs[part] == h)
                    mm = m[self._t(mine), :h]
                    a = mm.abs()
                    edge = torch.cat([a[:, :1], a[:, :-1], a[:, -2:-1]], dim=1)  # glottal._edge_mags
                    frame[self._t(part[mine])] = torch.angle(mm[:, : k - 1]) - self._min_phase_harm(edge, k)[:, 1:]
            which = self._t(np.searchsorted(counts, hs))
            table = self._t(np.stack([glottal._lf_phase_unwrapped(int(h)) for h in counts]))
            rd0, last = float(glottal.MSP_RD[0]), glottal.MSP_RD.size - 1 - 1e-9

            def error(rd: torch.Tensor) -> torch.Tensor:  # glottal._interp_rows, then glottal._msp_error
                pos = torch.clamp((rd - rd0) / 0.01, 0, last)
                j = pos.long()
                t = (pos - j)[:, None]
                p = frame - ((1 - t) * table[which, j] + t * table[which, j + 1])
                p = torch.nn.functional.pad(p, (1, 0))
                d2 = torch.diff(p, dim=1)[:, 1:] - p[:, 1:2]
                return torch.mean((torch.remainder(d2 + torch.pi, 2 * torch.pi) - torch.pi) ** 2, dim=1)

            rd_t, err_t = glottal.brent_min_rows(error, sel.size, *glottal.COVAREP_RD_RANGE, glottal.BRENT_TOL,
                                                 glottal.BRENT_MAX_ITER, xp=torch, device=self.device)  # fmt: skip
            rd_b[bounds[sel]], err_b[bounds[sel]] = rd_t.cpu().numpy(), err_t.cpu().numpy()
        return glottal.rd_rows_of(voiced, rd_b, err_b)


def _wrap(p: torch.Tensor) -> torch.Tensor:
    """harmonics.wrap: phase in [-pi, pi)."""
    return torch.remainder(p + torch.pi, 2 * torch.pi) - torch.pi


def _unwrap_rows(p: torch.Tensor) -> torch.Tensor:
    """np.unwrap along dim 1 (period 2 pi, discontinuity pi; a jump of exactly pi upwards stays pi)."""
    dd = torch.diff(p, dim=1)
    ddmod = torch.remainder(dd + torch.pi, 2 * torch.pi) - torch.pi
    ddmod = torch.where((ddmod == -torch.pi) & (dd > 0), torch.full_like(ddmod, torch.pi), ddmod)
    correct = torch.where(dd.abs() < torch.pi, torch.zeros_like(dd), ddmod - dd)
    return torch.cat([p[:, :1], p[:, 1:] + torch.cumsum(correct, dim=1)], dim=1)


def _nanmedian_rows(d: torch.Tensor) -> torch.Tensor:
    """np.nanmedian along dim 1 (the mean of the two middle values for an even count; NaN for none): torch's own
    nanmedian takes the lower one."""
    s = torch.sort(d, dim=1).values  # NaN sorts last
    m = (~torch.isnan(d)).sum(1)
    lo, hi = ((m - 1) // 2).clamp(min=0), (m // 2).clamp(min=0)
    out = (s.gather(1, lo[:, None]) + s.gather(1, hi[:, None]))[:, 0] / 2
    return torch.where(m > 0, out, torch.full_like(out, torch.nan))
