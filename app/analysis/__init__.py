"""Pure analysis: numpy/pandas in, dataclasses or arrays out. No web, database or queue imports."""
