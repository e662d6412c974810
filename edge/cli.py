import click


@click.group()
def main():
    """edgekit."""
