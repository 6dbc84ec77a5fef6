"""The Check yourself tab: `questions` (the six questions and their explanations), `tab` (asked and scored)."""
