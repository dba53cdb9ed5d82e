"""How answers are shown: display names and printers, the generated reference, plots."""
