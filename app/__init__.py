"""Everything a person sees: the CLI entry, the headless runner, the Textual editor, config."""
