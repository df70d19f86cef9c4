# The folders algos/, theory/, sim/ and paper_figures/ beside this one are the subpackages
# delaylab.algos, delaylab.theory, delaylab.sim and delaylab.paper_figures (pyproject.toml's
# [tool.setuptools.package-dir]). Installed, they are subfolders of delaylab; an editable install
# maps them with setuptools' finder. A checkout imported without either (PYTHONPATH=<checkout>, a
# Ray worker given the checkout as its working_dir, a checkout's root shadowing a regular install)
# finds them through _CheckoutFinder, which maps those four names and nothing else.
import os as _os
import sys as _sys
from importlib.machinery import PathFinder as _PathFinder

_MAPPED = ("algos", "theory", "sim", "paper_figures")


class _CheckoutFinder:
    """delaylab.<name> -> <checkout>/<name> for the names of _MAPPED."""

    checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        parent, _, child = fullname.rpartition(".")
        if parent != __name__ or child not in _MAPPED:
            return None
        return _PathFinder.find_spec(fullname, [cls.checkout])


if not _os.path.isdir(_os.path.join(__path__[0], "algos")) and not any(
        getattr(f, "__name__", "") == "_CheckoutFinder" for f in _sys.meta_path):
    _sys.meta_path.append(_CheckoutFinder)
