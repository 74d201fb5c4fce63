// paddle._C.telemetry: the worker's metrics registry (paddle/core/metrics_registry.h), the standard
// training metrics (paddle/parallel/training_metrics.h) and the pusher that sends them to
// paddlerun --dashboard (paddle/core/metrics_pusher.h). python/paddle/telemetry.py holds the
// process's one registry and is the interface Python loops use.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "paddle/core/metrics_pusher.h"
#include "paddle/core/metrics_registry.h"
#include "paddle/parallel/training_metrics.h"
#include "python/bindings/bindings.h"
#include "python/bindings/common.h"

namespace py = pybind11;

namespace paddle::python {

void BindTelemetry(py::module_& m) {
  py::module_ mm = m.def_submodule("telemetry", "the worker's metrics (docs/observability.md)");
  py::class_<MetricsRegistry>(mm, "MetricsRegistry")
      .def(py::init<>())
      .def(
          "add",
          [](MetricsRegistry& r, const std::string& name, double amount) {
            if (!(amount >= 0))
              throw py::value_error("a counter only goes up: amount must be >= 0");
            Check(r.CheckName(name, MetricKind::kCounter));
            r.GetCounter(name).Add(amount);
          },
          py::arg("name"), py::arg("amount") = 1.0)
      .def(
          "set",
          [](MetricsRegistry& r, const std::string& name, double value) {
            Check(r.CheckName(name, MetricKind::kGauge));
            r.GetGauge(name).Set(value);
          },
          py::arg("name"), py::arg("value"))
      .def(
          "observe",
          [](MetricsRegistry& r, const std::string& name, double value) {
            Check(r.CheckName(name, MetricKind::kHistogram));
            r.GetHistogram(name).Observe(value);
          },
          py::arg("name"), py::arg("value"))
      .def(
          "event",
          [](MetricsRegistry& r, const std::string& kind, const std::string& text) {
            r.RecordEvent(kind, text);
          },
          py::arg("kind"), py::arg("text"))
      .def("snapshot_json", &MetricsRegistry::SnapshotJson);

  py::class_<TrainingMetrics>(mm, "TrainingMetrics")
      .def(py::init<MetricsRegistry*>(), py::keep_alive<1, 2>(), py::arg("registry"))
      .def(
          "record_step",
          [](TrainingMetrics& t, double seconds, int64_t samples,
             std::optional<double> allreduce_wait_total) {
            if (!allreduce_wait_total.has_value()) {
              t.RecordStep(absl::Seconds(seconds), samples, nullptr);
              return;
            }
            ReducerStats stats;
            stats.comm_wait_time = absl::Seconds(*allreduce_wait_total);
            t.RecordStep(absl::Seconds(seconds), samples, &stats);
          },
          py::arg("seconds"), py::arg("samples"), py::arg("allreduce_wait_total") = py::none())
      .def(
          "record_data_wait",
          [](TrainingMetrics& t, double seconds) { t.RecordDataWait(absl::Seconds(seconds)); },
          py::arg("seconds"))
      .def("set_loss", &TrainingMetrics::SetLoss, py::arg("loss"))
      .def("set_accuracy", &TrainingMetrics::SetAccuracy, py::arg("accuracy"))
      .def(
          "set_membership",
          [](TrainingMetrics& t, int64_t generation, int rank, int size, const std::string& cause) {
            t.SetMembership(generation, rank, size, cause);
          },
          py::arg("generation"), py::arg("rank"), py::arg("size"), py::arg("cause"));

  py::class_<MetricsPusher>(mm, "MetricsPusher")
      .def_static(
          "from_env",
          [](MetricsRegistry* registry, int rank) {
            return Unwrap(MetricsPusher::FromEnv(registry, rank));
          },
          py::keep_alive<0, 1>(), py::arg("registry"), py::arg("rank"),
          "A pusher to PADDLE_METRICS_ADDR, or None where it is unset.")
      .def("set_rank", &MetricsPusher::set_rank, py::arg("rank"))
      .def_property_readonly("sent", &MetricsPusher::sent)
      .def_property_readonly("dropped", &MetricsPusher::dropped);
}

}  // namespace paddle::python
