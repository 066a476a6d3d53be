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

from extractors import glottal, hmpd, mcep, rd_conf, world_f0

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
    def _lpc(self, frames: torch.Tensor, order: int) -> torch.Tensor:
        """glottal.lpc_rows ("autocorrelation"): Levinson-Durbin on the Hann-windowed rows' autocorrelation."""
        win = frames * self._hanning(frames.shape[1])
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
        """mcep.true_envelope on the device (same passes, same stopping rule per row)."""
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
        kk = torch.arange(n_coef, device=self.device)[None, :]
        o = orders[:, None].to(a.dtype)
        lifter = torch.where(kk <= o, 0.54 + 0.46 * torch.cos(torch.pi * kk / torch.clamp(o, min=1)),
                             torch.zeros((), dtype=a.dtype, device=self.device))  # fmt: skip
        inside = torch.arange(dftlen // 2, device=self.device)[None, :] <= orders[:, None]
        doubling = torch.where(kk[0] == 0, 1.0, 2.0).to(a.dtype)
        a0, out = a.clone(), torch.empty_like(a)
        todo = torch.arange(a.shape[0], device=self.device)
        cc = torch.zeros((a.shape[0], n_coef), dtype=a.dtype, device=self.device)
        dblim = float(np.log(10 ** (mcep.TE_PREC_DB / 20)))
        for _ in range(mcep.TE_MAXIT):
            cep = torch.fft.irfft(a, dim=1)[:, : dftlen // 2]
            ccp = cep[:, :n_coef] * doubling
            e_out = torch.sqrt(torch.sum(torch.where(inside[:, 1:], 0.0, 2 * cep[:, 1:]) ** 2, dim=1))
            e_in = torch.sqrt(torch.sum(torch.where(inside[:, :n_coef], ccp, 0.0) ** 2, dim=1))
            lam = (e_in + e_out) / torch.clamp(e_in, min=1e-30)
            cc = lam[:, None] * lifter * (ccp - cc) + cc
            lv = torch.fft.rfft(cc, n=dftlen, dim=1).real
            a = torch.maximum(a, lv)
            out[todo] = lv
            done = torch.amax(a0 - lv, dim=1) <= dblim
            if bool(done.any()):
                keep = ~done
                todo, a, a0, cc, lifter, inside = todo[keep], a[keep], a0[keep], cc[keep], lifter[keep], inside[keep]
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
        """hmpd._filtfilt: odd reflection of 3 (len(b) - 1) rows at each end, then b's autocorrelation along the rows
        (the reference sums a constant b as two running means: the same sums in another order)."""
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

    def pdm_pdd(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """hmpd.pdm_pdd: per-bin PDM and PDD of PD phasors (rows, bins), float32 as the reference."""
        zt = self._t(z)
        zc, zs = zt.real.float(), zt.imag.float()
        rect_m = np.full(hmpd.PDM_ROWS, 1.0 / hmpd.PDM_ROWS, np.float32)
        mc, ms = self._filtfilt_rows(rect_m, zc), self._filtfilt_rows(rect_m, zs)
        mag = torch.hypot(mc, ms)
        big = mag > 1e-6
        scale = torch.where(big, 1.0 / torch.clamp(mag, min=1e-30), torch.zeros_like(mag))
        pdm = torch.complex(mc * scale, ms * scale)
        hann = np.hanning(hmpd.PDD_ROWS)
        hann /= hann.sum()

        def median_rows(x: torch.Tensor) -> torch.Tensor:  # hmpd._median_rows: zeros beyond the ends
            h = hmpd.PDD_ROWS // 2
            zeros = x.new_zeros((h, x.shape[1]))
            return torch.cat([zeros, x, zeros]).unfold(0, hmpd.PDD_ROWS, 1).median(dim=-1).values

        tc = self._filtfilt_rows(hann, median_rows(zc))
        ts = self._filtfilt_rows(hann, median_rows(zs))
        norm = torch.hypot(tc, ts)
        flat = norm == 0
        norm = torch.where(flat, torch.ones_like(norm), norm)
        cos_t, sin_t = torch.where(flat, torch.ones_like(tc), tc / norm), ts / norm
        dc, ds = zc * cos_t + zs * sin_t, zs * cos_t - zc * sin_t
        rect_d = np.full(hmpd.PDD_ROWS, 1.0 / hmpd.PDD_ROWS, np.float32)
        r = torch.hypot(self._filtfilt_rows(rect_d, dc), self._filtfilt_rows(rect_d, ds)).double()
        pdd = torch.where(r < 1 - 1e-5, torch.sqrt(-2 * torch.log(torch.clamp(r, 1e-300, 1.0))), torch.zeros_like(r))
        pdd = torch.where((zc != 0) | (zs != 0), pdd, torch.full_like(pdd, hmpd.PDD_NO_PHASE))
        return pdm.cpu().numpy(), pdd.cpu().numpy()

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
