"""History: every result kept (store), per-metric series and their change points (trends,
edivisive), the CI gate over them, and their pictures (page: the HTML trend page; frame: pandas)."""
