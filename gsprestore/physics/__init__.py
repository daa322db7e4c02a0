"""The observation model of the paper (Sec. 3.1): the sampling matrix H for each task, the Task objects
that own observation and scoring, and the protocol's metrics."""
