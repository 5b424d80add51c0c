"""The cloud-neutral pipeline core: graph generations, debounce, blast-radius guard, render stage.

Everything here is pure logic or a Protocol with an in-memory implementation;
the cloud adapters (``topocast.aws``, ...) are thin shells around it.
"""
