"""3. analyze: read an nsys export (`export`), build stages, pair CUDA calls, attribute them, compute the
metrics, findings and validation warnings (`result.analyze`), slice and scrub exports."""
