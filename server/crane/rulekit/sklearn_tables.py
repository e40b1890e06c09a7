"""What scikit-learn estimators accept, as tables keyed by class name and module (checked on 1.2.2).

- which estimators convert X to float (strings -> "could not convert string to float"), need 2-D X, and
  validate the feature count/names at predict time;
- which of them reject NaN (version-dependent: tree models accept NaN only from 1.3/1.4 on);
- which are supervised (fit(X, y) checks len(X) == len(y) and y for NaN) and which are regressors (y must be
  numeric);
- which estimators' predict/transform do NOT raise NotFittedError when unfitted (stateless ones).
Conservative by construction: an estimator not listed is one no rule speaks about.
"""

from __future__ import annotations

# Modules whose estimators run check_array(X, dtype=float) in fit/predict/transform.
NUMERIC_MODULES = (
    "sklearn.linear_model",
    "sklearn.ensemble",
    "sklearn.tree",
    "sklearn.svm",
    "sklearn.neighbors",
    "sklearn.naive_bayes",
    "sklearn.cluster",
    "sklearn.decomposition",
    "sklearn.neural_network",
    "sklearn.discriminant_analysis",
    "sklearn.gaussian_process",
    "sklearn.kernel_ridge",
    "sklearn.mixture",
    "sklearn.cross_decomposition",
    "sklearn.covariance",
    "sklearn.kernel_approximation",
    "sklearn.random_projection",
)

# preprocessing estimators that convert X to float.
NUMERIC_PREPROCESSORS = {
    "StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "Normalizer", "Binarizer",
    "PolynomialFeatures", "SplineTransformer", "PowerTransformer", "QuantileTransformer", "KBinsDiscretizer",
}

# Meta-estimators and estimators with special input handling inside those modules: never judged.
NOT_JUDGED = {
    "VotingClassifier", "VotingRegressor", "StackingClassifier", "StackingRegressor", "BaggingClassifier",
    "BaggingRegressor", "AdaBoostClassifier", "AdaBoostRegressor", "RANSACRegressor", "IsotonicRegression",
    "LatentDirichletAllocation", "DictionaryLearning", "MiniBatchDictionaryLearning", "SparseCoder",
    "GaussianProcessRegressor", "GaussianProcessClassifier", "KNeighborsTransformer",
    "RadiusNeighborsTransformer", "FeatureAgglomeration", "CategoricalNB",
}

# Estimators that accept NaN in X (scikit-learn 1.0-1.2 `allow_nan` tag), among the numeric ones.
ALLOW_NAN_1_2 = {
    "HistGradientBoostingClassifier", "HistGradientBoostingRegressor", "MaxAbsScaler", "MinMaxScaler",
    "PowerTransformer", "QuantileTransformer", "RobustScaler", "StandardScaler",
}
# Modules whose estimators reject NaN in every scikit-learn release up to 1.5 (trees and ensembles gained
# NaN support in 1.3-1.4, neighbors with nan_euclidean is special): used when the version is not 1.0-1.2.
NAN_REJECTING_ANY_VERSION = (
    "sklearn.linear_model",
    "sklearn.svm",
    "sklearn.neural_network",
    "sklearn.naive_bayes",
    "sklearn.discriminant_analysis",
    "sklearn.kernel_ridge",
    "sklearn.cross_decomposition",
)

UNSUPERVISED = {
    "IsolationForest", "RandomTreesEmbedding", "OneClassSVM", "NearestNeighbors", "KernelDensity",
    "LocalOutlierFactor", "BernoulliRBM", "SGDOneClassSVM",
}
UNSUPERVISED_MODULES = (
    "sklearn.cluster", "sklearn.decomposition", "sklearn.mixture", "sklearn.covariance",
    "sklearn.kernel_approximation", "sklearn.random_projection", "sklearn.preprocessing",
)

REGRESSORS_BY_NAME = {
    "Ridge", "RidgeCV", "Lasso", "LassoCV", "ElasticNet", "ElasticNetCV", "Lars", "LarsCV", "LassoLars",
    "LassoLarsCV", "LassoLarsIC", "MultiTaskLasso", "MultiTaskLassoCV", "MultiTaskElasticNet",
    "MultiTaskElasticNetCV", "OrthogonalMatchingPursuit", "OrthogonalMatchingPursuitCV", "BayesianRidge",
    "ARDRegression", "SVR", "NuSVR", "LinearSVR", "KernelRidge", "PLSRegression",
}

# predict/transform work (or fail otherwise) on these even when unfitted (scikit-learn 1.2.2, measured).
STATELESS = {
    "Binarizer", "Normalizer", "FunctionTransformer", "GaussianProcessRegressor", "DictVectorizer",
    "FeatureHasher", "HashingVectorizer", "OrdinalEncoder", "IsotonicRegression", "PatchExtractor",
    # meta-estimators whose fitted state lives in their steps
    "Pipeline", "FeatureUnion", "ColumnTransformer", "TransformedTargetRegressor",
    "SelectFromModel", "SequentialFeatureSelector", "FrozenEstimator",
}

X_METHODS = {
    "fit", "fit_transform", "fit_predict", "partial_fit", "predict", "predict_proba", "predict_log_proba",
    "decision_function", "transform", "score", "score_samples",
}
PREDICT_METHODS = {
    "predict", "predict_proba", "predict_log_proba", "decision_function", "transform", "score",
    "score_samples", "inverse_transform",
}
FIT_METHODS = {"fit", "fit_transform", "fit_predict", "partial_fit"}


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def needs_numeric_x(class_name: str, module: str) -> bool:
    """The estimator converts X to a 2-D float array in fit/predict/transform."""
    if not module.startswith("sklearn.") or class_name in NOT_JUDGED:
        return False
    if _in(module, ("sklearn.preprocessing",)):
        return class_name in NUMERIC_PREPROCESSORS
    return _in(module, NUMERIC_MODULES)


def rejects_nan(class_name: str, module: str, version: str | None) -> bool:
    """The estimator raises 'Input X contains NaN' (True only when sure for this version)."""
    if not needs_numeric_x(class_name, module):
        return False
    if version and version.split(".")[:2] in (["1", "0"], ["1", "1"], ["1", "2"]):
        return class_name not in ALLOW_NAN_1_2
    return _in(module, NAN_REJECTING_ANY_VERSION)


def is_supervised(class_name: str, module: str) -> bool:
    """fit(X, y) uses y: checks its length against X and rejects NaN in it."""
    if not needs_numeric_x(class_name, module) or class_name in UNSUPERVISED:
        return False
    return not _in(module, UNSUPERVISED_MODULES)


def is_regressor(class_name: str, module: str) -> bool:
    if not is_supervised(class_name, module):
        return False
    if class_name.startswith("Logistic"):
        return False
    return class_name.endswith(("Regressor", "Regression")) or class_name in REGRESSORS_BY_NAME


def raises_not_fitted(class_name: str, module: str) -> bool:
    """predict/transform on an unfitted instance raises NotFittedError."""
    return module.startswith("sklearn.") and class_name not in STATELESS
