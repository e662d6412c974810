"""What each command does, as library functions: they combine the packages (models, compilers,
federated, targets) for the CLI in ``edgekit.cli`` and for the benchmark scripts."""
