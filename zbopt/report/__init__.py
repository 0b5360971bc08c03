"""Pictures and reports: Gantt charts, memory curves, HTML."""
