"""What a run did, for the person who ran it and for scripts: the run report (`<store>/_runs/<run id>.json`),
its summary lines, and how busy each resource of the machine or cluster was (`utilisation`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from manifests.records import one_line
from pipeline import cluster, cpuload, exitcodes
from pipeline.sources import manifest_summary
from store import partial_line, spans_text  # noqa: F401 - spans_text: the report's to give


@dataclass
class RunReport:
    run_id: str
    dataset: str
    store: str
    counts: dict[str, dict[str, int]]  # feature -> done / skipped / failed / n/a
    failures: list[dict[str, Any]] = field(default_factory=list)
    filtered: dict[str, dict[str, str]] = field(default_factory=dict)  # feature -> item -> why (the policy's words)
    seconds: float = 0.0
    model_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)  # the Ray cluster used: address, nodes, resources, work
    manifest: list[dict[str, Any]] = field(default_factory=list)  # ManifestNote records: inputs not taken as they were
    damaged: list[dict[str, Any]] = field(default_factory=list)  # items found damaged: path, problem, recomputed
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> busy/worker seconds, units (stages.py)
    batches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # feature -> per actor: batch choices, cost
    # pairs committed with seconds that did not decode (damaged data, a truncated file): feature, item, file,
    # missing_s (the spans), missing_total_s, duration_s
    partial: list[dict[str, Any]] = field(default_factory=list)
    # pairs committed from a stream that ends before the file's other streams (video 8 s over 11 s of audio): by
    # design, not damage; feature, item, file, stream, duration_s (the stream's own end), streams_end_s
    shorter: list[dict[str, Any]] = field(default_factory=list)
    # pairs committed from a video that starts after the file's other streams (an empty edit, -itsoffset): not
    # damage, its rows start with it; feature, item, file, stream, stream_start_s
    late: list[dict[str, Any]] = field(default_factory=list)
    # files with more than one stream of a kind, once per (item, stream): item, file, stream, index (the one
    # decoded: ffmpeg's choice or the config's `tracks`), others (index, codec, size or channels, language, default)
    streams: list[dict[str, Any]] = field(default_factory=list)
    not_saved: str | None = None  # why <store>/_runs/<run id>.json could not be written (disk full, …)
    store_error: str | None = None  # the store could not be written (disk full): the run stopped there
    stopped: dict[str, Any] | None = None  # a signal stopped the run: signal, signum, during, not_computed
    planned: dict[str, int] = field(default_factory=dict)  # feature -> pairs the plan gave to compute
    ray_failed: dict[str, Any] | None = None  # Ray did not start or died (pipeline/raystart.py): what, hint, during…
    # the driver ended without saving this report (a bug's traceback, the out-of-memory killer), saved by the
    # command line's parent process (pipeline/supervise.py): what, exit_code, during, not_computed
    crashed: dict[str, Any] | None = None
    # each resource's busy fraction over the extraction, the binding one, the policy (`utilisation` below)
    utilisation: dict[str, Any] = field(default_factory=dict)
    # frames features of videos: feature -> what decoded its committed items' frames -> how many ("cpu",
    # "nvdec", "torchcodec-cpu"; media/nvdec.py)
    frames_decoders: dict[str, dict[str, int]] = field(default_factory=dict)
    # videos whose frames the CPU path decoded although the run sent them to the actors' decoder, one per file:
    # item, file, reason (NVDEC cannot show it as the CPU path does), where (decode task, model actor)
    cpu_decoded: list[dict[str, Any]] = field(default_factory=list)
    # Ray workers Ray itself ended during the run, from the raylet's count (pipeline/supervise.py): `oom` by its
    # memory monitor, `crashed` for any other reason (a segfault, an abort); their tasks were retried or failed
    worker_kills: dict[str, int] = field(default_factory=dict)
    # what the driver received from Ray, in bytes as serialized (pipeline/ownparts.py `wire_bytes`): `model
    # results` (rows, or the records of parts the actors wrote), `decode records`; `clips` and `pairs written
    # by actors`, for the bytes per clip (docs/scale.md, "Workers write their own parts")
    driver_received: dict[str, int] = field(default_factory=dict)
    # requests to object storage the store's backend retried with backoff during the run, by kind (throttled: 503
    # SlowDown or 429; dropped: a connection cut or timed out mid-request; server: another 5xx; connect: none
    # made), kinds with none left out (store/backends/objects.py): the driver's own requests (its uploads,
    # publishes, lease, reads) and the model actors' uploads of their own parts (counted in their processes, sent
    # back with each call's record: `add_retries`); not array chunks read through zarr (obstore's retries)
    storage_retries: dict[str, int] = field(default_factory=dict)

    def add_retries(self, retried: dict[str, int]) -> None:
        """Add a process's retried requests (`store.retries_since`) to `storage_retries`."""
        for kind, n in retried.items():
            self.storage_retries[kind] = self.storage_retries.get(kind, 0) + n

    @property
    def exit_code(self) -> int:
        """128 + the signal when one stopped the run; STORE when the store could not be written; FAILURES
        when any pair failed; DAMAGED when damaged items were left as they are; STORE when only the report
        could not be saved."""
        if self.stopped:
            return 128 + int(self.stopped["signum"])
        if self.ray_failed:
            return exitcodes.RAY
        if self.crashed:
            return int(self.crashed["exit_code"])
        if self.store_error:
            return exitcodes.STORE
        if any(c["failed"] for c in self.counts.values()):
            return exitcodes.FAILURES
        if any(not d["recomputed"] for d in self.damaged):
            return exitcodes.DAMAGED
        return exitcodes.STORE if self.not_saved else exitcodes.OK

    def not_computed(self) -> dict[str, int]:
        """feature -> planned pairs neither done nor failed (a stop left them), where any."""
        failed = {f: 0 for f in self.planned}
        for x in self.failures:
            if x["stage"] != "manifest" and x["feature"] in failed:
                failed[x["feature"]] += 1
        left = {f: n - self.counts.get(f, {}).get("done", 0) - failed[f] for f, n in self.planned.items()}
        return {f: n for f, n in left.items() if n > 0}

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def summary(self) -> str:
        lines = [f"{self.dataset}: {self.store} ({self.seconds:.1f} s)"]
        lines += self.notes
        if self.cluster:
            lines.append(cluster.summary_line(self.cluster))
        lines += manifest_summary(self.manifest)
        lines += batch_lines(self.batches)
        lines += utilisation_lines(self.utilisation)
        lines += decoder_lines(self.frames_decoders, self.cpu_decoded)
        lines += kills_lines(self.worker_kills, self.run_id)
        lines += retries_lines(self.storage_retries)
        partial = {feat: sum(p["feature"] == feat for p in self.partial) for feat in self.counts}
        lines.append(f"  {'feature':<12}{'done':>6}{'partial':>9}{'skipped':>9}{'failed':>8}{'n/a':>6}")
        for feat, c in self.counts.items():
            lines.append(f"  {feat:<12}{c['done']:>6}{partial[feat]:>9}{c['skipped']:>9}{c['failed']:>8}{c['n/a']:>6}")
        for d in self.damaged:
            lines.append(f"  DAMAGED {d['feature']}/{d['item']} ({d['path']}): {d['problem']}; "
                         + ("recomputed" if d["recomputed"] else "not in this run, left as it is"))
        for f in self.failures:  # one line per (feature, item): features sharing a decode failure each say so
            lines.append(failed_line(f["feature"], f))
        lines += [partial_line(p) for p in self.partial]  # done, but with seconds that have no rows
        lines += [shorter_line(s) for s in self.shorter]
        lines += [late_line(s) for s in self.late]
        lines += [streams_line(s) for s in self.streams]
        for feat, items in self.filtered.items():
            for item, why in sorted(items.items()):
                lines.append(f"  FILTERED {feat}/{item}: {why}")
        if self.store_error:
            lines.append(f"  STOPPED: {self.store_error}")
            left = self.not_computed()
            if left:
                lines.append(f"  NOT COMPUTED after the stop: {sum(left.values())} planned pair(s) ("
                             + ", ".join(f"{feat} {n}" for feat, n in left.items()) + ")")
        if self.not_saved:
            lines.append(f"  run report NOT saved: {self.not_saved}")
        failed = sum(c["failed"] for c in self.counts.values())
        if self.stopped:
            s = self.stopped
            left = f"; {s['not_computed']} planned pair(s) not computed" if s.get("not_computed") is not None else ""
            by = f"because {s['cause']} ({s['signal']} from the kernel)" if s.get("cause") else f"by {s['signal']}"
            lines.append(f"  STOPPED {by} during {s['during']}: committed pairs are kept{left}; "
                         f"the next run computes what is missing: exit code {self.exit_code}")
        elif self.ray_failed:
            lines.append(ray_failed_line(self.ray_failed, self.exit_code))
        elif self.crashed:
            c = self.crashed
            left = f"; {c['not_computed']} planned pair(s) not computed" if c.get("not_computed") is not None else ""
            lines.append(f"  ENDED during {c['during']}: {c['what']}; committed pairs are kept{left}: "
                         f"exit code {self.exit_code}")
        elif self.store_error:
            left = sum(self.not_computed().values())
            lines.append(f"  STOPPED: the store could not be written; committed pairs are kept, {failed} failed, "
                         f"{left} planned pair(s) not computed; the next run computes what is missing once the "
                         f"store is writable: exit code {self.exit_code}")
        elif failed:
            lines.append(f"  completed with {failed} failed (feature, item) pair(s): exit code {self.exit_code}")
        elif self.exit_code:
            lines.append(f"  completed with problems: exit code {self.exit_code}")
        return "\n".join(map(one_line, lines))


# "[Errno 1094995529] " (FFmpeg's error codes as errno) and "[Errno 2] ": the text after it says it in words
_ERRNO = re.compile(r"\[Errno -?\d+\] ")


def failure_text(file: str | None, error: str) -> str:
    """A failure's error as a person reads it after the file named once: without the file again (quoted or as a
    prefix, as PyAV and our own InputError repeat it), the errno numbers or the input error's class name."""
    text = _ERRNO.sub("", error).removeprefix("InputError: ")
    if file:
        for form in (f": '{file}'", f" '{file}'", f"{file}: ", f": {file}", file):
            text = text.replace(form, "")
    return text.strip() or error


def failed_line(feature: str, f: dict[str, Any]) -> str:
    return f"  FAILED {feature}/{f['item']} [{f['stage']}] {f['file'] or ''}: {failure_text(f['file'], f['error'])}"


STREAMS = {"frames": "video", "audio": "audio"}  # input kind -> the stream of the file it is decoded from


def shorter_record(feature: str, item: str, file: str | None, kind: str, duration_s: float | None,
                   streams_end_s: float) -> dict[str, Any]:
    return {"feature": feature, "item": item, "file": file, "stream": STREAMS.get(kind, kind),
            "duration_s": duration_s, "streams_end_s": streams_end_s}


def shorter_line(s: dict[str, Any]) -> str:
    """A note: the pair's stream is shorter than the file by design; its rows end with it, nothing is missing."""
    own = f"{s['duration_s']:.2f}" if s["duration_s"] is not None else "?"
    return (f"  shorter stream {s['feature']}/{s['item']} {s['file'] or ''}: the {s['stream']} ends at {own} s, the "
            f"file's other streams at {s['streams_end_s']:.2f} s (not damage: its rows end there)")


def kills_lines(kills: dict[str, int], run_id: str) -> list[str]:
    """One line when Ray ended workers under the run: how many, why, what became of their work, where Ray's
    own words are (its paragraphs stay off the terminal)."""
    oom, crashed = kills.get("oom", 0), kills.get("crashed", 0)
    if not oom and not crashed:
        return []
    why = [f"{oom} for lack of memory" if oom else "", f"{crashed} that crashed (a segfault, an abort)" if crashed else ""]
    hint = "; less at once (`max_inflight_bytes`, fewer actors) or more memory" if oom else ""
    return [f"  WORKERS KILLED by Ray: {' and '.join(w for w in why if w)}; their tasks were retried (a pair whose "
            f"retries ran out is FAILED below){hint}; Ray's messages: _runs/{run_id}.ray.log"]


RETRIES = {"throttled": "throttled (503 SlowDown)", "dropped": "dropped connection(s)", "server": "server error(s)",
           "connect": "failed connection(s)"}


def retries_lines(retries: dict[str, int]) -> list[str]:
    """One line when requests to object storage were retried: how many of each kind. A request that failed on
    every try failed its pairs, each FAILED below."""
    if not any(retries.values()):
        return []
    return [f"  storage requests retried with backoff: {sum(retries.values())} ("
            + ", ".join(f"{n} {RETRIES.get(k, k)}" for k, n in retries.items() if n) + ")"]


def late_record(feature: str, item: str, file: str | None, kind: str, stream_start_s: float) -> dict[str, Any]:
    return {"feature": feature, "item": item, "file": file, "stream": STREAMS.get(kind, kind),
            "stream_start_s": stream_start_s}


def late_line(s: dict[str, Any]) -> str:
    """A note: the pair's stream starts after the file's origin; the seconds before it have no rows, not damage."""
    return (f"  late start {s['feature']}/{s['item']} {s['file'] or ''}: the {s['stream']} starts at "
            f"{s['stream_start_s']:.2f} s (not damage: no rows before it)")


def streams_record(item: str, file: str | None, kind: str, note: dict[str, Any]) -> dict[str, Any]:
    return {"item": item, "file": file, "stream": STREAMS.get(kind, kind), "index": note["index"],
            "others": note["others"]}


def streams_line(s: dict[str, Any]) -> str:
    """Which of a file's several streams of a kind the rows are of, and the others it has."""
    def other(o: dict[str, Any]) -> str:
        what = "x".join(map(str, o["size"])) if "size" in o else f"{o.get('channels')} ch"
        return f"#{o['index']} {o['codec']} {what}" + (f" {o['language']}" if "language" in o else "") \
            + (" default" if o.get("default") else "")
    return (f"  streams {s['item']} {s['file'] or ''}: {s['stream']} stream #{s['index']} decoded; also in the file: "
            + ", ".join(other(o) for o in s["others"]) + " (RunConfig.tracks chooses another)")


def decoder_lines(decoders: dict[str, dict[str, int]], cpu_decoded: list[dict[str, Any]]) -> list[str]:
    """What decoded the frames (one line per feature), and each file the CPU path had to decode, with why."""
    lines = [f"  frames of {feat}: " + ", ".join(f"{n} by {d}" for d, n in sorted(counts.items()))
             for feat, counts in sorted(decoders.items()) if set(counts) != {"cpu"}]  # (CPU alone: as always)
    if cpu_decoded:
        lines.append(f"  {len(cpu_decoded)} video(s) decoded on the CPU: the GPU decoder cannot show them as the "
                     "CPU path does")
    return lines + [f"  CPU-DECODED {c['item']} {c['file'] or ''}: {c['reason']}" for c in cpu_decoded]


def batch_lines(batches: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per feature: the batch sizes its actors used and where they came from, and the measured cost."""
    lines = []
    for feat, workers in sorted(batches.items()):
        chosen = sorted({(c["input"], c["batch"], c["source"]) for w in workers for c in w["choices"]})
        if not chosen:
            continue
        units = sum(w["units"] for w in workers)
        cost = sum(w["model_s"] for w in workers) / units if units else None
        unit = next(c["unit"] for w in workers for c in w["choices"])
        lines.append(f"  batch {feat}: " + ", ".join(f"{b} ({source}, {inp})" for inp, b, source in chosen)
                     + (f"; {cost * 1e3:.1f} ms per {unit} in this run" if cost else ""))
    return lines


def utilisation(calls: dict[str, list[dict[str, Any]]], cpus: float, workers: dict[str, int],
                policy: str = "", samples: list[tuple[float, float, float]] | None = None,
                machine_cores: int = 0) -> dict[str, Any]:
    """Each resource's busy fraction over the extraction (first decode start to last commit end) and over its
    steady part (first model call's end to the last model call's end: actors loaded, pipeline full), and the
    binding one: the resource that was busiest in the steady part, which is what a faster run needs more of.

    `calls`: stage -> call records (`stages.call_record`, model calls tagged with their actor's `gpu`);
    `cpus`: the CPU cores Ray had; `workers`: feature -> its model actors. Resources: `cpu` (core-seconds of
    decode tasks and model calls over cores x time), `gpu <id>` (the union of that GPU's model calls),
    `actors <feature>` (a feature's actor-seconds over actors x time: its pool is the bottleneck near 1.0),
    `driver` (the store commits, which run on the driver).

    `samples`: pipeline/cpuload.py's (time, the run's process tree CPU-s, the machine's busy core-s): each window
    then has `whole`, the CPU as the machine saw it beside the calls' (`calls_cpu_s`): the run's processes
    (`run_cpu_s`, `run`: over the run's cores) and the machine, every user's (`machine_cpu_s`, `machine`: over
    its `machine_cores`)."""
    every = [c for group in calls.values() for c in group]
    model = [c for c in every if c["stage"].startswith("model:")]
    if not every:
        return {}
    windows = {"run": (min(c["start_s"] for c in every), max(c["end_s"] for c in every))}
    if model:
        windows["steady"] = (min(c["end_s"] for c in model), max(c["end_s"] for c in model))
    out: dict[str, Any] = {"policy": policy, "cpus": cpus}
    for name, (t0, t1) in windows.items():
        span = t1 - t0
        if span <= 0:
            continue
        busy = _busy(calls, cpus, workers, t0, t1)
        out[name] = {"seconds": round(span, 3), "busy": {k: round(min(v, 1.0), 4) for k, v in busy.items()}}
        whole = cpuload.between(samples or [], t0, t1)
        if whole is not None and cpus and machine_cores:
            calls_cpu = sum(_inside(c, t0, t1) * c.get("cpu_s", 0.0) for c in every
                            if not c["stage"].startswith("commit:"))
            out[name]["whole"] = {"calls_cpu_s": round(calls_cpu, 3), "run_cpu_s": round(whole[0], 3),
                                  "machine_cpu_s": round(whole[1], 3), "machine_cores": machine_cores,
                                  "run": round(whole[0] / (cpus * span), 4),
                                  "machine": round(whole[1] / (machine_cores * span), 4)}
    steady = out.get("steady") or out.get("run")
    if steady:
        # a pool whose actors were as busy as the GPU they share is the more useful answer (a busy GPU here means
        # calls in flight on it, not its cores saturated)
        out["binding"] = max(steady["busy"], key=lambda k: (round(steady["busy"][k], 2), k.startswith("actors ")))
    return out


OVER_TIME_BINS = 40  # the run's window in this many equal bins: a curve on the report page, a few KB of report


def utilisation_over_time(calls: dict[str, list[dict[str, Any]]], cpus: float, workers: dict[str, int],
                          bins: int = OVER_TIME_BINS) -> dict[str, Any]:
    """Each resource's busy fraction per time bin of the extraction (first decode start to last commit end), as
    `utilisation` counts it over the whole window: `start_s` (bins' starts from the window's start), `bin_s`,
    `busy` (resource -> one fraction per bin). {} without calls."""
    every = [c for group in calls.values() for c in group]
    if not every:
        return {}
    t0, t1 = min(c["start_s"] for c in every), max(c["end_s"] for c in every)
    width = (t1 - t0) / bins
    if width <= 0:
        return {}
    edges = [t0 + k * width for k in range(bins + 1)]
    per_bin = [_busy(calls, cpus, workers, a, b) for a, b in zip(edges, edges[1:], strict=False)]
    return {"start_s": [round(e - t0, 3) for e in edges[:-1]], "bin_s": round(width, 4),
            "busy": {k: [round(min(b[k], 1.0), 3) for b in per_bin] for k in per_bin[0]}}


def _busy(calls: dict[str, list[dict[str, Any]]], cpus: float, workers: dict[str, int], t0: float,
          t1: float) -> dict[str, float]:
    """Each resource's busy fraction in [t0, t1) (`utilisation` says what each resource counts), not capped."""
    span = t1 - t0
    every = [c for group in calls.values() for c in group]
    model = [c for c in every if c["stage"].startswith("model:")]
    work = [c for c in every if not c["stage"].startswith("commit:")]
    busy = {"cpu": sum(_inside(c, t0, t1) * c.get("cpu_s", 0.0) for c in work) / (cpus * span) if cpus else 0.0}
    for gpu in sorted({c["gpu"] for c in model if c.get("gpu")}):
        busy[f"gpu {gpu}"] = _union([c for c in model if c.get("gpu") == gpu], t0, t1) / span
    for feat, n in sorted(workers.items()):
        mine = calls.get(f"model:{feat}", [])
        if mine and n:
            busy[f"actors {feat}"] = sum(_inside(c, t0, t1) * (c["end_s"] - c["start_s"]) for c in mine) / (n * span)
    busy["driver"] = _union([c for c in every if c["stage"].startswith("commit:")], t0, t1) / span
    return busy


def _inside(call: dict[str, Any], t0: float, t1: float) -> float:
    """The share of a call's duration inside [t0, t1]."""
    a, b = call["start_s"], call["end_s"]
    if b <= a:
        return 1.0 if t0 <= a <= t1 else 0.0
    return max(0.0, min(b, t1) - max(a, t0)) / (b - a)


def _union(calls: list[dict[str, Any]], t0: float, t1: float) -> float:
    from pipeline.stages import union_seconds

    return union_seconds((max(c["start_s"], t0), min(c["end_s"], t1)) for c in calls if c["end_s"] > t0 and c["start_s"] < t1)


BUSY_SHOWN = 4  # resources on the summary's busy line, busiest first; the run report has them all


def utilisation_lines(u: dict[str, Any]) -> list[str]:
    """One short line: the binding resource, then the next busiest (the run report has every one)."""
    part = u.get("steady") or u.get("run")
    if not part:
        return []
    busy = part["busy"]
    binding, *others = sorted(busy, key=lambda k: (k != u["binding"], -busy[k]))
    hint = ""
    if binding.startswith("actors ") and busy[binding] >= 0.8:  # a pool, not the machine, held the run
        feat = binding.removeprefix("actors ")
        hint = " (add actors: " + (f"`actors_per_gpu = {{{feat} = N}}`)" if any(k.startswith("gpu ") for k in busy)
                                   else "`cpu_actors`)")
    shown = [f"{binding} {100 * busy[binding]:.0f} % binding{hint}",
             *(f"{k} {100 * busy[k]:.0f} %" for k in others[:BUSY_SHOWN - 1])]
    more = f", +{len(others) - BUSY_SHOWN + 1} more" if len(others) >= BUSY_SHOWN else ""
    whole = ""
    if w := part.get("whole"):  # the calls' CPU is not all of it: Ray, the driver, workers between calls
        times = f" ({w['run_cpu_s'] / w['calls_cpu_s']:.2f}x the calls')" if w["calls_cpu_s"] else ""
        whole = (f"; cpu seen: this run {100 * w['run']:.0f} % of {u['cpus']:g} cores{times}, "
                 f"the machine {100 * w['machine']:.0f} % of {w['machine_cores']}")
    return [f"  busy ({part['seconds']:.0f} s steady): " + ", ".join(shown) + more + whole]


def ray_failed_line(failed: dict[str, Any], exit_code: int) -> str:
    """The summary's last line for a run whose Ray failed (`RunReport.ray_failed`, pipeline/raystart.py). Here,
    not in raystart: raystart imports supervise, which reads reports (no import cycle)."""
    left = f"; {failed['not_computed']} planned pair(s) not computed" if failed.get("not_computed") is not None else ""
    return (f"  RAY FAILED during {failed['during']}: {failed['what']}; committed pairs are kept{left}: "
            f"{failed['hint']}: exit code {exit_code}")
