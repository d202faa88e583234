"""Never imported by the server: a spec target here is reported as never wrapped."""


def never_called():
    return None
