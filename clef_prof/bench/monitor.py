"""Device and host figures of a running server, sampled every 0.5 s on a thread.

GPU (NVML through `nvidia-ml-py`): memory used on the device and by the server's processes,
SM clock, utilisation, temperature and the clock-event (throttle) reasons. Host: the resident
memory of the server's process tree (`psutil`). Both libraries are imported lazily: without
one, its figures are None and `notes` says why.
"""
from __future__ import annotations

import threading
import time

MIB = 1024 * 1024
# clock-event reasons that mean the GPU slowed itself: thermal and power-brake slowdowns
_THROTTLE = {"sw_thermal": 0x20, "hw_slowdown": 0x8, "hw_thermal": 0x40, "hw_power_brake": 0x80}
CLOCK_DROP = 0.9      # a window's lowest SM clock below 90% of its highest is a clock drop


class Poller:
    """A daemon thread that calls the subclass's `poll()` every `interval_s` from `start()` to
    `stop()` (first at once where `poll_first`), its samples under `_lock`: bench's monitor and
    scraper."""

    name = "clef-prof-poll"
    poll_first = True

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        if self.poll_first:
            self.poll()
        while not self._stop.wait(self.interval_s):
            self.poll()


class Monitor(Poller):
    """`Monitor(pids_fn).start()`, `window(t0_ns, t1_ns)` for the figures of a span, `stop()`.

    pids_fn() gives the server's process ids at the time of a sample (its whole tree)."""

    name = "clef-prof-monitor"
    poll_first = False          # start() samples on the caller's thread

    def __init__(self, pids_fn, interval_s: float = 0.5):
        super().__init__(interval_s)
        self.pids_fn = pids_fn
        self.samples: list[dict] = []
        self.notes: list[str] = []
        self._psutil = self._nvml = None
        self._handles: list = []
        try:
            import psutil
            self._psutil = psutil
        except ImportError:
            self.notes.append("psutil is not installed: host RSS not measured (pip install psutil)")
        from ..record.plan import gpu_present
        if gpu_present():
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml = pynvml
                self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            except ImportError:
                self.notes.append("nvidia-ml-py is not installed: no device memory, clocks or temperature "
                                  "(pip install nvidia-ml-py)")
            except Exception as exc:  # NVML present but unusable (driver mismatch, no permission)
                self.notes.append(f"NVML failed ({type(exc).__name__}: {exc}): no device figures")
                self._nvml = None

    @property
    def gpu(self) -> bool:
        return self._nvml is not None

    def start(self) -> "Monitor":
        self.sample()
        return super().start()

    def stop(self) -> None:
        super().stop()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def poll(self) -> None:
        self.sample()

    def sample(self) -> dict:
        """Take one sample now (also called at window edges, so that a short window has two)."""
        pids = set(self.pids_fn())
        s = {"t_ns": time.monotonic_ns(), "host_rss_mib": self._rss(pids)}
        if self._nvml is not None:
            s.update(self._gpu(pids))
        with self._lock:
            self.samples.append(s)
        return s

    def _rss(self, pids: set[int]) -> float | None:
        if self._psutil is None:
            return None
        total = 0
        for pid in pids:
            try:
                total += self._psutil.Process(pid).memory_info().rss
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                pass
        return total / MIB

    def _gpu(self, pids: set[int]) -> dict:
        nv = self._nvml

        def get(fn, *a):
            try:
                return fn(*a)
            except nv.NVMLError:
                return None
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        used, mine, clocks, utils, temps, reasons, found = [], 0, [], [], [], 0, False
        for h in self._handles:
            mem = get(nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                used.append(mem.used)
            for p in get(nv.nvmlDeviceGetComputeRunningProcesses, h) or []:
                if p.pid in pids:
                    found = True
                    mine += p.usedGpuMemory or 0
            util = get(nv.nvmlDeviceGetUtilizationRates, h)
            for out, v in ((clocks, get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
                           (utils, util.gpu if util is not None else None),
                           (temps, get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU))):
                if v is not None:
                    out.append(v)
            reasons |= get(reasons_fn, h) or 0
        return {"device_used_mib": sum(used) / MIB if used else None,
                "server_device_mib": mine / MIB if found else None,
                "sm_clock_mhz": min(clocks) if clocks else None, "gpu_util_pct": max(utils) if utils else None,
                "temperature_c": max(temps) if temps else None,
                "throttle": [n for n, bit in _THROTTLE.items() if reasons & bit]}

    def window(self, t0_ns: int, t1_ns: int) -> dict:
        """Peak memory, clock range, mean utilisation, peak temperature and flags of the samples in [t0, t1]."""
        with self._lock:
            sel = [s for s in self.samples if t0_ns <= s["t_ns"] <= t1_ns]

        def vals(k):
            return [s[k] for s in sel if s.get(k) is not None]

        def peak(k):
            v = vals(k)
            return round(max(v), 1) if v else None
        clocks, utils = vals("sm_clock_mhz"), vals("gpu_util_pct")
        out = {"samples": len(sel), "host_rss_peak_mib": peak("host_rss_mib"),
               "device_memory_peak_mib": peak("device_used_mib"),
               "server_device_memory_peak_mib": peak("server_device_mib"),
               "sm_clock_mhz_min": min(clocks) if clocks else None, "sm_clock_mhz_max": max(clocks) if clocks else None,
               "gpu_util_pct_mean": round(sum(utils) / len(utils), 1) if utils else None,
               "temperature_c_max": peak("temperature_c"), "flags": []}
        if clocks and min(clocks) < CLOCK_DROP * max(clocks):
            out["flags"].append(f"SM clock drop {max(clocks)} → {min(clocks)} MHz")
        throttled = sorted({r for s in sel for r in s.get("throttle", [])})
        if throttled:
            out["flags"].append("throttle: " + ", ".join(throttled))
        return out
