"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.openapi_docs import ERRORS
from app.deps import GatewayDep
from app.errors import ModelNotFoundError
from app.schemas.models import Model, ModelList

router = APIRouter()


@router.get("/v1/models", response_model=ModelList, summary="List models", responses=ERRORS)
async def list_models(gateway: GatewayDep) -> ModelList:
    """List the served model."""
    return ModelList(data=[Model(id=gateway.model_id, created=gateway.created)])


@router.get(
    "/v1/models/{model_id:path}",
    response_model=Model,
    summary="Retrieve a model",
    responses=ERRORS,
)
async def retrieve_model(model_id: str, gateway: GatewayDep) -> Model:
    """Describe the served model."""
    if model_id != gateway.model_id:
        raise ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")
    return Model(id=gateway.model_id, created=gateway.created)
