"""Reading: every input (nsys SQLite exports, Kineto traces, nsys' Python samples, record
folders) becomes the same columnar tables."""
