"""Imported first by clef-prof's forkserver (analyze.parallel): SIGINT's default action from here
on, so that a Ctrl-C ends the server while it imports the rest of its preload, and the workers
it forks (which get back the disposition it had before it ignored SIGINT) at any point of their
start, without a traceback; the parent process says "interrupted". The server was started with
SIGINT ignored, which covers the interpreter's start before this import."""
import signal

signal.signal(signal.SIGINT, signal.SIG_DFL)
