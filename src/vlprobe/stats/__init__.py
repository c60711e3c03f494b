"""Statistics over items: metric definitions, bootstrap intervals, permutation and paired tests."""
