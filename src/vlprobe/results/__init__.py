"""Reading results back: collecting, comparing, plotting, the HTML report and the known-answer table."""
