"""Post-mortem report: one picture and a verdict for a whole training run.

    source (recorded log | Prometheus range data)
        → the exporter's own Engine, driven in virtual time   (collect.py)
        → per-tick tracks of every GPU and peer group          (Recording)
        → findings in plain words with the remedy              (findings.py)
        → report.html, heatmap.png, findings.json              (outputs.py: render.py, figure.py)

No analysis is reimplemented here: stalls, imbalance, peer deviation and the stall
period come from gpulse.engine / gpulse.analysis; this package only reads what they
produce over the whole run and puts it into words and pictures.
"""
