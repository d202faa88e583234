"""2. record: nsys with the right flags around a server (`session`), its processes (`procs`), load (`load`),
repeated A/B captures (`ab`), the manifest beside each capture (`manifest`), and a demo server."""
