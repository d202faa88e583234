"""4b. bench: serving A/B without the profiler: load cases (`load`), statistics (`stats`), GPU monitor
(`monitor`), the run itself (`run`)."""
