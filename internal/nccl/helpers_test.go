package nccl

// Value-returning forms of parseLineTo and classifyTo, for the tests.

// parseLine classifies one line (without its '\n').
func parseLine(line []byte) logLine {
	var l logLine
	parseLineTo(line, &l)
	return l
}

// classify extracts the fact an INFO message carries, if any.
func classify(msg []byte) event {
	var ev event
	classifyTo(msg, &ev)
	return ev
}
