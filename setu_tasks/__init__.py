"""The task contract between setu-server and the runtimes that work its tasks
(agents and cloud workers): what a task asks for (specs), what it answers
(results), and the one codec between these and the wire. The server and the
runtime both import it; it imports neither."""
