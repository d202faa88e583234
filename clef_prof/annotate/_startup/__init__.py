"""The directory `clef-prof inject` puts first on PYTHONPATH: its `sitecustomize.py` installs
the stage spec named by $CLEF_PROF_SPEC in every Python process that starts with it."""
