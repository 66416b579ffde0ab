"""The one compiled module, the LETOR text scanner; every other setting is in pyproject.toml.

setuptools builds it with the C compiler of the platform when the package is installed
(``pip install -e .`` or a wheel); it uses only the CPython C API, so it needs no build
dependency beyond setuptools.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        # Named by its installed module, its source relative to the repository root.
        Extension("differank.datamodules._letor_text", ["datamodules/_letor_text.c"]),
    ]
)
