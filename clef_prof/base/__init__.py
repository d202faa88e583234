"""The shared base: configuration, errors, safe I/O, redaction, nsys and CUPTI facts, glyphs
(standard library only; imports no other subpackage)."""
