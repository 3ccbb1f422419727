"""The bug zoo: implementations written from the outside, one bug each, that the suites
must catch (and a correct one per suite that they must pass)."""
