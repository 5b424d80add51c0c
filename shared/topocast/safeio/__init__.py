"""Reading and writing outside input safely: size caps, one-line validation errors, YAML without
tags, files written by temp file and rename. The lowest layer beside ``errors``."""
