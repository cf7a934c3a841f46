"""Bit-exact, faster drop-ins for other libraries' sample orders."""
