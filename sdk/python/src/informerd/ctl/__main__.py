"""``python -m informerd.ctl``: the same as the ``informerctl`` console script."""

from informerd.ctl import console_main

console_main()
