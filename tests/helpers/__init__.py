"""What the tests share beyond fixtures, one idea a module: `from helpers.clock import
FakeClock`. tests/ is on sys.path because pytest imports tests/conftest.py, which sits
in no package, with its folder put first on sys.path (the default `prepend` import
mode, in each xdist worker as in a plain run). tests/conftest.py has pytest rewrite
the asserts in here as in a test, so that a failing one shows what it compared."""
