"""4. compare: arms of repeated captures (`arm`), resampled confidence intervals (`resample`), the
comparison itself (`engine`) and its CI gates and renderers (`gates`)."""
