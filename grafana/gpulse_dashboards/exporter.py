"""The health of the gpulse exporters themselves."""
from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from .common import CLUSTER, COUNT, HEALTH_INTERVAL, PER_SECOND, SECONDS, alerts_annotation, label_variable, new_dashboard, query
from .panels import merge_table, stat_panel, state_timeline, table_panel, time_series, value_text

UID = "gpulse-exporter-health"
SEL = f'{CLUSTER}, job=~"$job", instance=~"$instance"'


def build() -> db.Dashboard:
    d = (new_dashboard(UID, "gpulse exporter health",
                       "Is every gpulse exporter scraped, sampling on time and reading its GPUs without "
                       "errors?", time_from="now-3h")
         .with_variable(label_variable("job", "Job", 'label_values(gpulse_build_info{cluster=~"$cluster"}, job)'))
         .with_variable(label_variable("instance", "Instance",
                                       'label_values(gpulse_build_info{cluster=~"$cluster", job=~"$job"}, instance)'))
         .annotation(alerts_annotation('instance=~"$instance"')))

    d = (d
         .with_panel(stat_panel(
             "Exporters up", "Exporters Prometheus scraped successfully on its last attempt, out of "
             "those it knows about.", COUNT,
             query(f"sum(up{{{SEL}}})", "up", instant=True), w=6))
         .with_panel(stat_panel(
             "Exporters down", "Exporters whose last scrape failed. Their GPUs' series go stale and "
             "alerts on them stop evaluating.", COUNT,
             query(f"count(up{{{SEL}}} == 0) or vector(0)", "down", instant=True),
             thresholds=((None, "green"), (1, "red")), w=6))
         .with_panel(stat_panel(
             "Stale samplers", "Exporters still serving but whose sampler has had no successful poll "
             "for --stale-after: their numbers are frozen.", COUNT,
             query(f"sum(gpulse_exporter_stale{{{SEL}}})", "stale", instant=True),
             thresholds=((None, "green"), (1, "red")), w=6))
         .with_panel(stat_panel(
             "GPUs reporting", "GPUs read successfully on the last poll, over all selected exporters.", COUNT,
             query(f"sum(gpulse_gpu_up{{{SEL}}})", "GPUs", instant=True), w=6)))

    d = (d.with_row(db.Row("Timing"))
         .with_panel(time_series(
             "Scrape duration", "How long Prometheus took to scrape each exporter. A scrape only "
             "reads the latest snapshot, so it should stay in the milliseconds whatever the GPUs do.",
             SECONDS, query(f"scrape_duration_seconds{{{SEL}}}", "{{instance}}"),
             min_val=0, w=8, interval=HEALTH_INTERVAL))
         .with_panel(time_series(
             "Sample loop duration", "Mean and 99th percentile of one poll of the GPU source plus "
             "ingestion. When it approaches the sample interval the exporter falls behind.", SECONDS,
             query(f"sum by (instance) (rate(gpulse_exporter_sample_duration_seconds_sum{{{SEL}}}[$__rate_interval]))"
                   f" / sum by (instance) (rate(gpulse_exporter_sample_duration_seconds_count{{{SEL}}}[$__rate_interval]))",
                   "{{instance}} mean", "A"),
             query("histogram_quantile(0.99, sum by (instance, le) "
                   f"(rate(gpulse_exporter_sample_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                   "{{instance}} p99", "B"),
             min_val=0, w=8, interval=HEALTH_INTERVAL))
         .with_panel(time_series(
             "Time since last successful sample", "Seconds since each exporter last polled its GPUs "
             "successfully. It should stay below the sample interval; a climbing line is a hung "
             "driver call or a dead source.", SECONDS,
             query(f"time() - gpulse_exporter_last_sample_timestamp_seconds{{{SEL}}}", "{{instance}}"),
             min_val=0, w=8, interval=HEALTH_INTERVAL)))

    d = (d.with_row(db.Row("Errors and staleness"))
         .with_panel(time_series(
             "Source errors by call", "Errors per second returned by the GPU library, by call and "
             "exporter. One GPU failing shows up here while the others keep reporting.", PER_SECOND,
             query(f"sum by (instance, call) (rate(gpulse_source_errors_total{{{SEL}}}[$__rate_interval]))",
                   "{{instance}} {{call}}"),
             min_val=0, interval=HEALTH_INTERVAL))
         .with_panel(state_timeline(
             "Sampler staleness", "Green while the sampler polls on time, red while it is stale.", COUNT,
             query(f"gpulse_exporter_stale{{{SEL}}}", "{{instance}}"),
             mappings=value_text({"0": ("fresh", "green"), "1": ("stale", "red")})))
         .with_panel(time_series(
             "Samples per scrape", "Series each exporter returned per scrape: grows with GPUs and "
             "attribution labels; a sudden jump is new label values.", COUNT,
             query(f"scrape_samples_scraped{{{SEL}}}", "{{instance}}"), min_val=0, interval=HEALTH_INTERVAL))
         .with_panel(table_panel(
             "Build", "Version, GPU source and Python of each exporter: exporters on different versions "
             "can disagree on metric names during a rollout.", COUNT,
             query(f"gpulse_build_info{{{SEL}}}", "", instant=True, table=True),
             transformations=merge_table({}, hide=("Time", "__name__", "Value")))))
    return d
