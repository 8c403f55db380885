"""The one root exception. Its message is a sentence for a person, never a traceback."""


class SlothError(Exception):
    """Something the user can cause or fix: a bad id, a locked or damaged database, ..."""


class UnknownJob(SlothError):
    def __init__(self, job_id: str, why: str = "") -> None:
        super().__init__(why or f"no job with id {job_id!r}")
        self.job_id = job_id


class DatabaseProblem(SlothError):
    """The queue file cannot be used as it is; it has been left untouched."""
