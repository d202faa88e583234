"""A plain Python model server behind aiohttp in the shape annotations/pytorch-server-template.toml
names (myserver.app, myserver.model): the worked example of docs/profile-your-own-server.md,
recorded by tests/annotate/test_template_spec.py. No torch: the "device" is a copy in memory."""
