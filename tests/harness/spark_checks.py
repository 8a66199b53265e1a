"""What the KerasEstimator checks (``tests/distributed/scripts/spark_estimator_check.py``), the streamed fit
(``spark_stream_check.py``) and the tuning (``spark_tuning_check.py``) must show, wherever they ran.

One function per part of a driver's result: test_spark.py, test_spark_stream.py and test_spark_tuning.py assert
them on keras2's local[2], test_spark_cluster.py on keras3's standalone cluster. Below, which of Horovod's own Spark
Keras scenarios (``scripts/horovod_spark_keras_check.py``) run in which driver.
"""

# Horovod's scenarios whose ranks Spark starts (a Horovod start each): in the local[2] driver
# (test_horovod_spark_keras.py, keras2).
SCENARIOS_WITH_RANKS = ["test_fit_model", "test_fit_model_with_tensorflow_dataset_prefetch_buffer_size",
                        "test_fit_model_multiclass"]
# Those whose user backend trains in the driver, where Keras 3's differences (losses, metrics, saving) show: in the
# standalone cluster's driver (test_spark_cluster.py, keras3), whose executors prepare and transform.
SCENARIOS_IN_THE_DRIVER = ["test_restore_from_checkpoint", "test_keras_direct_parquet_train",
                           "test_keras_model_checkpoint_callback", "test_model_serialization"]


def assert_fit(fit):
    """Two ranks trained a two-output model with weighted rows like one process on their global batches, the
    validation rows those the column marks, with rank 0's checkpoints in the store."""
    assert fit["history_keys"] == ["cls_accuracy", "cls_loss", "loss", "lr", "reg_loss", "val_cls_accuracy",
                                   "val_cls_loss", "val_loss", "val_reg_loss"], fit
    assert fit["rows"] == {"train": 192, "val": 64}, fit  # every fourth row is marked for validation
    assert fit["epochs"] == 2
    assert fit["checkpoints"] == ["epoch-0001", "epoch-0002"]  # rank 0's checkpoints, in the store's run
    assert fit["single"] < 1e-5, fit  # the ranks' weights = one process stepping on their weighted global batches
    seconds = fit["seconds"]  # where the fit's time went: every part there, none negative, adding up
    assert {"data", "ranks", "rank_start", "rank_setup", "rank_training", "model_back", "total"} <= set(seconds), fit
    assert min(seconds.values()) >= 0 and seconds["rank_training"] > 0, seconds
    driver_parts = ("checks", "data", "prepare_ranks", "ranks", "model_back")
    assert abs(seconds["total"] - sum(seconds[k] for k in driver_parts)) < 0.1, seconds
    assert fit["same_files"], fit  # a second prepare of the same DataFrame writes the same rows in the same order
    # keep_intermediate_data=True kept this fit's own Parquet, named after its run
    assert [n.split(".")[0] + "." + n.split(".")[1] for n in fit["kept"]] == ["intermediate_train_data.run1",
                                                                             "intermediate_val_data.run1"], fit


def assert_transform(transform):
    """``transform`` added the output columns to every row, typed by their label columns, and it predicts."""
    assert transform["columns"] == ["features", "extra", "label", "id", "target", "weight", "is_val", "label_prob",
                                    "target_pred"]
    assert transform["target_type"] == "double"  # one value per row: a double, as Horovod's
    # where the label column holds arrays, the output is an array column with the vector column's predictions
    assert transform["array_type"] == "array<float>" and transform["array_same"], transform
    assert transform["rows"] == 256 and transform["pandas_rows"] == 256
    assert transform["accuracy"] > 0.4  # four classes; chance is 0.25
    # each output type equal to the model's own predict on the same rows
    assert set(transform["max_diff"]) == {"vector", "double", "array"}, transform
    assert all(diff <= 1e-6 for diff in transform["max_diff"].values()), transform["max_diff"]


def assert_persist(persist):
    """The model saved and loaded alone and in a PipelineModel predicts the same; a second save is one line."""
    assert persist["loaded_same"] and persist["pipeline_same"]
    assert persist["output_cols"] == ["label_prob", "target_pred"] and persist["type"] == "KerasModel"
    assert persist["fit_seconds_kept"]
    assert persist["save_twice"].endswith("already holds a saved model; use model.write().overwrite().save(path)")


def assert_errors(errors):
    """Each bad input ended ``fit`` (or the constructor) in its one line."""
    assert errors["missing"].startswith("feature_cols names column 'pixels', which the DataFrame does not have")
    assert errors["string"].startswith("column 'name' holds string, which a Keras model cannot take")
    assert errors["empty"].startswith("the DataFrame has no rows to train on")
    assert errors["length"] == ("feature column 'extra' holds 3 values per row, but the model's input 'image' takes"
                                " shape (8, 8, 1) (64 values); reshape the column or the input")
    assert errors["unknown"].startswith("KerasEstimator has no parameter 'epoch' (Received: epoch=...)")
    assert errors["petastorm"] == ("KerasEstimator(transformation_fn=...) has no meaning here: it is petastorm's;"
                                   " transform the DataFrame before fit(); remove it")
    assert errors["run_id_path"] == ("run_id must be a name of letters, digits, '.', '_' and '-' (at most 128,"
                                     " starting with a letter or digit), not a path (Received: run_id='../../x')")
    assert errors["other_job"] == ("run_id 'run1' holds checkpoints trained by another job (batch_size: 16 -> 8): pass"
                                   " another run_id to start over, or resume='force' to continue from its weights"
                                   " anyway")
    assert errors["null_label"] == ("column 'label_vec' holds nulls in 1 of 256 rows: drop or fill them before fit()"
                                    " (df.na.drop(subset=[...]) or df.na.fill(...))")
    assert errors["nan_features"] == ("column 'features' holds NaN or infinities in 2 of 256 rows: drop or fix them"
                                      " before fit() (or pass allow_nan=True for a model built to take NaN)")
    assert errors["inf_extra"] == ("column 'extra' holds NaN or infinities in 1 of 256 rows: drop or fix them before"
                                   " fit() (or pass allow_nan=True for a model built to take NaN)")
    assert errors["executable"] == ("cannot start the rank's Python '/no/such/python' on this executor (No such file"
                                    " or directory): pass SparkBackend(executable=...) a Python every executor has,"
                                    " or leave it unset to run the task's own"), errors
    assert errors["held"].startswith("run_id 'held' is being fitted by another fit (host ")
    assert errors["held"].endswith("wait for it to end, or pass another run_id")
    assert all("\n" not in line for line in errors.values())


def assert_checked_early(checked):
    """NaN let through when asked; the petastorm-only parameters accepted; the refused fits left no Parquet."""
    assert checked["nan_allowed"] is None
    assert checked["no_effect"] == {"pool": "process", "start": "fork"}
    assert checked["left"] == []


def assert_streamed(stream):
    """Each rank's share, three times the memory it may use, streamed and trained to the end within that limit."""
    streamed = stream["streamed"]
    assert stream["rows"] // 2 * (256 * 4 + 8) >= 3 * stream["limit_bytes"]  # each rank's share, in its rows' bytes
    assert streamed.get("epochs") == 1, streamed
    assert len(streamed["ranks"]) == 2 and len({r["cgroup"] for r in streamed["ranks"]}) == 2, streamed
    for rank in streamed["ranks"]:  # each rank was within its own limit, and touched memory there
        assert 0 < rank["peak_bytes"] <= stream["limit_bytes"], streamed
    assert "cgroups_left" not in stream, stream


def assert_unfitted_pipeline(tuned):
    """A Pipeline of a VectorAssembler and the estimator, unfitted, saved and loaded with its parameters."""
    assert tuned["unfitted"] == {"stages": ["VectorAssembler", "KerasEstimator"], "epochs": 1,
                                 "feature_cols": ["features"], "loss": "binary_crossentropy"}


def assert_train_validation_split(tuned):
    """TrainValidationSplit picked the better learning rate by a Spark ML evaluator, and its model reloads."""
    tvs = tuned["tvs"]
    low, high = tvs["metrics"]  # 1 epoch at 0.01, then 4 epochs at 0.5: the evaluator tells them apart
    assert high > low, tvs
    assert tvs["best"] == ["VectorAssembler", "KerasModel"] and tvs["best_epochs"] == 4, tvs
    assert tvs["auc"] > 0.9 and tvs["reloaded_auc"] == tvs["auc"], tvs


def assert_tuning_queued(tuned):
    """The grid's fits ran one after another (parallelism=2 asked for two at once), each in a run of its own."""
    # TrainValidationSplit: 2 fits and the best one's refit on every row
    assert tuned["fits"] == 3 and tuned["runs"] == 3, tuned
    assert tuned["most_at_once"] == 1, tuned
