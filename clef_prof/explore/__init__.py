"""5. explore: the pandas data model (`frames`, behind `clef_prof.open`), plots, the HTML page (`html`) and
the terminal/Markdown/CSV renderers (`text`)."""
