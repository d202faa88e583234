"""what-if: the cost of a stage's host time to serving throughput and latency, measured by
injected slowdowns on fresh unprofiled servers (`clef-prof whatif`), and the serving change a
compare's stage changes predict, beside bench's measured one."""
