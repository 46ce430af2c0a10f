"""The package list; everything else is in pyproject.toml.

Every package under launcher/ is found (a folder with an ``__init__.py``: none listed by hand, so a
new one cannot be left out of the wheel), plus the folders at the top of the checkout that travel
inside it (pyproject.toml's package-dir maps them): conf/, examples/ and docs/.
"""

from setuptools import find_packages, setup

SHIPPED = ["launcher.conf", "launcher.examples", "launcher.docs"]

setup(packages=[*find_packages(include=["launcher", "launcher.*"]), *SHIPPED])
