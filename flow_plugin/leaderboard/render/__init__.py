"""The render stage: the compare stage's :class:`~flow_plugin.leaderboard.compare.Compared` as Markdown
(:mod:`.markdown`), a self-contained HTML page and the folder's index (:mod:`.html`) and a PNG chart
(:mod:`.chart`), with the cell texts they share (:mod:`.text`); the task-types board as Markdown and HTML
(:mod:`.task_types`) and its pictures, the heatmap and the summary across boards (:mod:`.task_types_chart`); and a
row as an exported model's card shows it (:mod:`.card`). Renderings read the comparison and
compute nothing.
"""
