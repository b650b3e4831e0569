"""Compiling functions, by responsibility (:mod:`tenure.function` is the entry
point and re-exports the public names):

- :mod:`.io`: :class:`~.io.In` and :class:`~.io.Out`, how each input and
  output may be aliased;
- :mod:`.mode`: :class:`~.mode.Mode` (rewrites, and a linker named in
  :data:`tenure.linkers.table.LINKERS`);
- :mod:`.prepare`: givens, updates and default updates, unused and missing
  inputs, where shared storage must be, swapping shared variables in a copy;
- :mod:`.aliasing`: what may alias what, decided at compile time, and the
  copies a call makes;
- :mod:`.signature`: binding a call's arguments to the inputs;
- :mod:`.calls`: locks, re-entry and transactions;
- :mod:`.fast_call`: the C call path;
- :mod:`.compiled`: :class:`~.compiled.Function`, which ties them together.

Nothing below this package (symbolic, rewrites, linkers, printing) imports it.
"""
