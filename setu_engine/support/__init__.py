"""What the engine needs of the host it runs on: the network it may reach
(egress), secret references and files, closing, test pause points."""
